//! Just enough HTTP/1.1 for the fake: one request per connection, `Content-Length` or chunked
//! bodies, every answer `Connection: close`.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpStream;

/// Largest request head, in bytes.
const HEAD_BYTES_MAX: usize = 16 * 1024;
/// Largest request body, in bytes.
const BODY_BYTES_MAX: usize = 1024 * 1024;

/// One parsed request.
#[derive(Debug)]
pub struct Request {
    /// The request path, e.g. `/bot123:abc/getMe`.
    pub path: String,
    /// The body bytes.
    pub body: Vec<u8>,
}

fn invalid(message: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

/// Reads one request from `stream`.
pub fn read_request(reader: &mut BufReader<TcpStream>) -> io::Result<Request> {
    let mut head_bytes = 0;
    let request_line = read_head_line(reader, &mut head_bytes)?;
    let mut parts = request_line.split(' ');
    let (Some(_method), Some(path)) = (parts.next(), parts.next()) else {
        return Err(invalid("bad request line"));
    };
    let path = path.to_owned();
    let mut content_length = 0;
    let mut chunked = false;
    loop {
        let line = read_head_line(reader, &mut head_bytes)?;
        if line.is_empty() {
            break;
        }
        let Some((name, value)) = line.split_once(':') else {
            return Err(invalid("bad header"));
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            content_length = value.parse().map_err(|_| invalid("bad content-length"))?;
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.eq_ignore_ascii_case("chunked");
        }
    }
    let body = if chunked {
        read_chunked(reader, &mut head_bytes)?
    } else {
        read_exact_body(reader, content_length)?
    };
    Ok(Request { path, body })
}

fn read_head_line(reader: &mut BufReader<TcpStream>, head_bytes: &mut usize) -> io::Result<String> {
    let mut line = Vec::new();
    let limit = u64::try_from(HEAD_BYTES_MAX.saturating_sub(*head_bytes)).unwrap_or(0);
    reader.by_ref().take(limit).read_until(b'\n', &mut line)?;
    *head_bytes += line.len();
    if line.last() != Some(&b'\n') {
        return Err(invalid("request head too large or cut"));
    }
    let text = String::from_utf8(line).map_err(|_| invalid("head not UTF-8"))?;
    Ok(text.trim_end_matches(['\r', '\n']).to_owned())
}

fn read_exact_body(reader: &mut BufReader<TcpStream>, length: usize) -> io::Result<Vec<u8>> {
    if length > BODY_BYTES_MAX {
        return Err(invalid("body too large"));
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    Ok(body)
}

fn read_chunked(reader: &mut BufReader<TcpStream>, head_bytes: &mut usize) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let size_line = read_head_line(reader, head_bytes)?;
        let size_text = size_line.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16).map_err(|_| invalid("bad chunk size"))?;
        if size == 0 {
            // Trailers, up to the empty line.
            while !read_head_line(reader, head_bytes)?.is_empty() {}
            return Ok(body);
        }
        if body.len() + size > BODY_BYTES_MAX {
            return Err(invalid("body too large"));
        }
        let mut chunk = vec![0; size];
        reader.read_exact(&mut chunk)?;
        body.extend_from_slice(&chunk);
        read_head_line(reader, head_bytes)?;
    }
}

/// Writes a JSON answer and closes the write side.
pub fn write_response(stream: &mut TcpStream, status: u16, body: &[u8]) -> io::Result<()> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        409 => "Conflict",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        _ => "Status",
    };
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body)?;
    stream.flush()?;
    stream.shutdown(std::net::Shutdown::Write)
}
