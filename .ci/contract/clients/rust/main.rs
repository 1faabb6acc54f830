// The Rust client quicktype generates from the contract (aep.rs, serde),
// built by Debian's rustc and cargo offline against Debian's serde crates,
// sends one line of every message type an agent sends to a real host,
// through the single exchange (POST /send with Accept: application/json,
// over std's TcpStream: no HTTP or WebSocket crate). Each line is decoded
// with the generated type of its message and sent as serde serializes it
// (quicktype's --skip-serializing-none leaves absent fields out). A reply
// that refuses a line as malformed (parse_error, schema_violation,
// version_mismatch), or a refused handshake, fails the run.
//
// usage: aepclient <host:port> <requests.json>
#[allow(dead_code)]
mod aep;
mod table;

use std::io::{Read, Write};
use std::net::TcpStream;

fn post(addr: &str, path: &str, session: &str, body: &str) -> Result<(u16, String), String> {
    let mut s = TcpStream::connect(addr).map_err(|e| e.to_string())?;
    let mut req = format!("POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nAccept: application/json\r\nConnection: close\r\nContent-Length: {}\r\n", path, addr, body.len());
    if !session.is_empty() {
        req.push_str(&format!("X-Session-Id: {}\r\n", session));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&raw).to_string();
    let (head, rest) = text.split_once("\r\n\r\n").ok_or("no HTTP header")?;
    let status: u16 = head.split(' ').nth(1).and_then(|c| c.parse().ok()).ok_or("no HTTP status")?;
    let chunked = head.lines().any(|l| l.to_ascii_lowercase().starts_with("transfer-encoding:") && l.to_ascii_lowercase().contains("chunked"));
    if !chunked {
        return Ok((status, rest.to_string()));
    }
    // Chunked: sizes in hex, each chunk followed by CRLF, 0 ends.
    let mut out = String::new();
    let mut r = rest;
    loop {
        let (size, tail) = r.split_once("\r\n").ok_or("bad chunk")?;
        let n = usize::from_str_radix(size.trim(), 16).map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
        out.push_str(&tail[..n]);
        r = &tail[n + 2..];
    }
    Ok((status, out))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 3 {
        eprintln!("usage: aepclient <host:port> <requests.json>");
        std::process::exit(2);
    }
    let addr = &args[1];
    let reqs: Vec<serde_json::Value> = serde_json::from_str(&std::fs::read_to_string(&args[2]).expect("requests.json")).expect("requests.json");
    let (_, created) = post(addr, "/session", "", "").expect("POST /session");
    let created: serde_json::Value = serde_json::from_str(&created).expect("POST /session body");
    let session = created["session_id"].as_str().expect("session_id").to_string();
    let malformed = ["parse_error", "schema_violation", "version_mismatch"];
    let mut bad = 0;
    let mut types = std::collections::BTreeSet::new();
    for r in &reqs {
        let (typ, def, name, line) = (r["type"].as_str().unwrap(), r["def"].as_str().unwrap(), r["name"].as_str().unwrap(), r["line"].as_str().unwrap());
        types.insert(typ.to_string());
        let body = match table::codec(def, line) {
            None => {
                eprintln!("rust client: no generated type for {}", def);
                std::process::exit(1);
            }
            Some(Err(e)) => {
                bad += 1;
                eprintln!("FAIL {} {}: the generated type does not round-trip the line: {}", typ, name, e);
                continue;
            }
            Some(Ok(b)) => b,
        };
        let (status, reply) = match post(addr, "/send", &session, &body) {
            Ok(x) => x,
            Err(e) => {
                eprintln!("rust client: {}: POST /send: {}", typ, e);
                std::process::exit(1);
            }
        };
        if status == 202 {
            println!("{:32} {:24} 202 (a notification)", typ, name);
            continue;
        }
        let m: serde_json::Value = serde_json::from_str(&reply).unwrap_or(serde_json::Value::Null);
        let mtype = m["type"].as_str().unwrap_or("");
        let code = m["code"].as_str().unwrap_or("");
        if status != 200 || mtype.is_empty() {
            bad += 1;
            eprintln!("FAIL {} {}: HTTP {} {}", typ, name, status, reply);
        } else if (mtype == "error" && malformed.contains(&code)) || (mtype == "handshake/resp" && m["ok"] != serde_json::Value::Bool(true)) {
            bad += 1;
            eprintln!("FAIL {} {}: sent {}\n  answered {}", typ, name, body, reply);
        } else {
            println!("{:32} {:24} {} {}", typ, name, mtype, code);
        }
    }
    if bad > 0 {
        eprintln!("rust client: {} of {} lines refused or not sent", bad, reqs.len());
        std::process::exit(1);
    }
    println!("rust (quicktype, rustc 1.63): {} lines of {} message types sent, none refused as malformed", reqs.len(), types.len());
}
