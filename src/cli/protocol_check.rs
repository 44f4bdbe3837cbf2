//! `pi-workflows protocol-check`: validate client.v1 lines (for client authors). Reads
//! standard input, prints one verdict per line, exits 3 when any line is invalid.

use std::io::Write;
use std::process::ExitCode;

use clap::Args;

use crate::protocol::{FrameError, FrameReadError, FrameReader, decode_client_message};

#[derive(Debug, Args)]
pub struct ProtocolCheckArgs {}

pub fn run(_args: ProtocolCheckArgs) -> anyhow::Result<ExitCode> {
    let stdin = std::io::stdin().lock();
    let mut stdout = std::io::stdout().lock();
    let mut reader = FrameReader::new(stdin);
    let (mut valid, mut invalid) = (0usize, 0usize);
    for number in 1.. {
        let verdict = match reader.read_line() {
            Ok(None) => break,
            Ok(Some(line)) => match decode_client_message(line) {
                Ok(_) => Ok(()),
                Err(err) => Err(format!("{}: {err}", err.code())),
            },
            Err(FrameReadError::Frame(err @ FrameError::TooLarge { .. })) => Err(format!("{}: {err}", err.code())),
            Err(err) => return Err(err.into()),
        };
        match verdict {
            Ok(()) => {
                valid += 1;
                writeln!(stdout, "line {number}: valid")?;
            }
            Err(reason) => {
                invalid += 1;
                writeln!(stdout, "line {number}: invalid ({reason})")?;
            }
        }
    }
    writeln!(stdout, "{valid} valid, {invalid} invalid")?;
    Ok(if invalid == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(super::EXIT_PROBLEMS_FOUND)
    })
}
