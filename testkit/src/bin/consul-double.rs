//! Runs the Consul agent double standalone, so clients from other ecosystems (and the
//! `meshline` CLI) can talk to it.
//!
//! ```text
//! consul-double [--port N] [--tick-ms N] [--acl-token T]
//! ```
//!
//! Prints the bound `host:port` on stdout once it accepts connections, then serves until
//! killed.

use std::io::Write;
use std::time::Duration;

use meshline_testkit::{ConsulDouble, ConsulDoubleOptions};

const USAGE: &str = "usage: consul-double [--port N] [--tick-ms N] [--acl-token T]";

fn main() {
    let mut opts = ConsulDoubleOptions::default();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |name: &str| {
            args.next().unwrap_or_else(|| {
                eprintln!("{name} needs a value\n{USAGE}");
                std::process::exit(2)
            })
        };
        match a.as_str() {
            "--port" => opts.port = parse(&value("--port"), "--port"),
            "--tick-ms" => {
                opts.tick = Duration::from_millis(parse(&value("--tick-ms"), "--tick-ms"))
            }
            "--acl-token" => opts.acl_token = Some(value("--acl-token")),
            "-h" | "--help" => {
                println!("{USAGE}");
                return;
            }
            other => {
                eprintln!("unknown argument `{other}`\n{USAGE}");
                std::process::exit(2);
            }
        }
    }
    let double = match ConsulDouble::start(opts) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("consul-double: {e}");
            std::process::exit(1);
        }
    };
    println!("{}", double.addr());
    let _ = std::io::stdout().flush();
    loop {
        std::thread::park();
    }
}

fn parse<T: std::str::FromStr>(v: &str, name: &str) -> T {
    v.parse().unwrap_or_else(|_| {
        eprintln!("{name}: `{v}` is not a valid number\n{USAGE}");
        std::process::exit(2)
    })
}
