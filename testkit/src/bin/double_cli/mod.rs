//! The command line shared by the `consul-double` and `eureka-double` binaries: their
//! flags (usage errors exit 2, `-h` prints the usage), and serving until killed.
//!
//! A directory module, so that cargo does not take it for a binary of its own.

use std::io::Write;
use std::net::SocketAddr;
use std::str::FromStr;

/// The arguments of a double binary, read flag by flag.
pub struct Args {
    usage: &'static str,
    args: std::iter::Skip<std::env::Args>,
}

impl Args {
    /// The process arguments; `usage` is printed with every usage error.
    pub fn new(usage: &'static str) -> Self {
        Args {
            usage,
            args: std::env::args().skip(1),
        }
    }

    /// The next flag; `-h` / `--help` prints the usage and exits 0.
    pub fn next_flag(&mut self) -> Option<String> {
        let a = self.args.next()?;
        if a == "-h" || a == "--help" {
            println!("{}", self.usage);
            std::process::exit(0);
        }
        Some(a)
    }

    /// The value after flag `name`.
    pub fn value(&mut self, name: &str) -> String {
        self.args.next().unwrap_or_else(|| {
            eprintln!("{name} needs a value\n{}", self.usage);
            std::process::exit(2)
        })
    }

    /// The value after flag `name`, as a number.
    pub fn number<T: FromStr>(&mut self, name: &str) -> T {
        let v = self.value(name);
        v.parse().unwrap_or_else(|_| {
            eprintln!("{name}: `{v}` is not a valid number\n{}", self.usage);
            std::process::exit(2)
        })
    }

    /// Rejects `flag`, which the binary does not know.
    pub fn unknown(&self, flag: &str) -> ! {
        eprintln!("unknown argument `{flag}`\n{}", self.usage);
        std::process::exit(2)
    }
}

/// The started double, or exits 1 saying why `name` did not start.
pub fn started<T>(name: &str, r: meshline_testkit::Result<T>) -> T {
    r.unwrap_or_else(|e| {
        eprintln!("{name}: {e}");
        std::process::exit(1)
    })
}

/// Prints `addr` on stdout (the sign that the double accepts connections), then serves
/// until killed.
pub fn serve_forever(addr: SocketAddr) -> ! {
    println!("{addr}");
    let _ = std::io::stdout().flush();
    loop {
        std::thread::park();
    }
}
