//! The `pi-workflows` binary is linked with the functions a server runs placed first
//! (build.rs, `link/hot-text.txt`): what keeps a server's resident code to the few MB it runs
//! instead of nearly all of its 8 MB text (docs/PERFORMANCE.md, thirty-third round).

#![cfg(target_os = "linux")]

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// A section of an ELF64 little-endian file: its name, address and size.
#[derive(Debug)]
struct Section {
    name: String,
    address: u64,
    size: u64,
}

/// The sections an ELF64 little-endian file's section header table names.
fn sections(path: &Path) -> std::io::Result<Vec<Section>> {
    let mut file = File::open(path)?;
    let mut header = [0u8; 64];
    file.read_exact(&mut header)?;
    assert_eq!(&header[..4], b"\x7fELF", "{} is not an ELF file", path.display());
    assert_eq!(header[4], 2, "{} is not a 64-bit ELF file", path.display());
    let table_offset = u64::from_le_bytes(header[0x28..0x30].try_into().expect("8 bytes"));
    let entry_size = u16::from_le_bytes([header[0x3a], header[0x3b]]) as usize;
    let count = u16::from_le_bytes([header[0x3c], header[0x3d]]) as usize;
    let names_index = u16::from_le_bytes([header[0x3e], header[0x3f]]) as usize;
    assert!(
        entry_size >= 64 && count > names_index,
        "a malformed section header table"
    );
    let mut table = vec![0u8; entry_size * count];
    file.seek(SeekFrom::Start(table_offset))?;
    file.read_exact(&mut table)?;
    let field = |entry: usize, at: usize| {
        let start = entry * entry_size + at;
        u64::from_le_bytes(table[start..start + 8].try_into().expect("8 bytes"))
    };
    let name_offset = |entry: usize| {
        let start = entry * entry_size;
        u32::from_le_bytes(table[start..start + 4].try_into().expect("4 bytes")) as usize
    };
    let mut names = vec![0u8; field(names_index, 32) as usize];
    file.seek(SeekFrom::Start(field(names_index, 24)))?;
    file.read_exact(&mut names)?;
    Ok((0..count)
        .map(|entry| {
            let name = &names[name_offset(entry).min(names.len())..];
            let end = name.iter().position(|&byte| byte == 0).unwrap_or(name.len());
            Section {
                name: String::from_utf8_lossy(&name[..end]).into_owned(),
                address: field(entry, 16),
                size: field(entry, 32),
            }
        })
        .collect())
}

#[test]
fn the_server_binary_places_its_hot_functions_before_the_rest_of_its_code() {
    if option_env!("PI_WORKFLOWS_HOT_TEXT") == Some("off") {
        return; // built without it on purpose
    }
    let binary = Path::new(env!("CARGO_BIN_EXE_pi-workflows"));
    let sections = sections(binary).expect("read the binary's section headers");
    let find = |name: &str| sections.iter().find(|section| section.name == name);
    let hot = find(".text.hot").unwrap_or_else(|| {
        panic!(
            "{} has no .text.hot section: build.rs did not link it with link/hot-text.txt",
            binary.display()
        )
    });
    let text = find(".text").expect("a .text section");
    assert!(
        hot.size > 0,
        "link/hot-text.txt matched no function of {}",
        binary.display()
    );
    assert!(
        hot.address + hot.size <= text.address,
        "the hot functions must come before the rest: {hot:?} {text:?}"
    );
}
