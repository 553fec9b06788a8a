//! Runs the Eureka server double standalone, so clients from other ecosystems (and the
//! `meshline` CLI) can talk to it.
//!
//! ```text
//! eureka-double [--port N] [--eviction-ms N] [--retention-ms N] [--no-delta]
//! ```
//!
//! Prints the bound `host:port` on stdout once it accepts connections (the service URL
//! is `http://host:port/eureka`), then serves until killed.

use std::io::Write;
use std::time::Duration;

use meshline_testkit::{EurekaDouble, EurekaDoubleOptions};

const USAGE: &str =
    "usage: eureka-double [--port N] [--eviction-ms N] [--retention-ms N] [--no-delta]";

fn main() {
    let mut opts = EurekaDoubleOptions::default();
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
            "--eviction-ms" => {
                opts.eviction_interval =
                    Duration::from_millis(parse(&value("--eviction-ms"), "--eviction-ms"))
            }
            "--retention-ms" => {
                opts.retention =
                    Duration::from_millis(parse(&value("--retention-ms"), "--retention-ms"))
            }
            "--no-delta" => opts.delta_enabled = false,
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
    let double = match EurekaDouble::start(opts) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("eureka-double: {e}");
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
