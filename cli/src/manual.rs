//! What explains the command to people: the examples every `--help` ends with, shell
//! completions (`meshline completions bash|zsh|fish|elvish|powershell`, clap_complete)
//! and the man page (`meshline man`, clap_mangen), both generated from the same clap
//! definition as the parser, so they never list a subcommand or flag it does not have.

use std::io::Write;
use std::path::Path;

use clap::CommandFactory;
use clap_complete::Shell;
use meshline::RegistryError;

/// `meshline --help`.
pub const MESHLINE: &str = "\
Examples:
  meshline lookup default_tx_group
  meshline --config seata.properties doctor
  meshline --registry etcd3 --server http://127.0.0.1:2379 watch --cluster default
  meshline completions bash > ~/.local/share/bash-completion/completions/meshline
  meshline man > meshline.1

Exit codes: 0 success, 2 usage error, 1 registry or configuration error.";

/// `meshline lookup --help`.
pub const LOOKUP: &str = "\
Examples:
  meshline lookup default_tx_group
  meshline --config seata.properties lookup --cluster default --json
  meshline --registry nacos --server 127.0.0.1:8848 lookup my_tx_group";

/// `meshline watch --help`.
pub const WATCH: &str = "\
Examples:
  meshline --config registry.conf watch my_tx_group
  meshline --registry etcd3 --server http://127.0.0.1:2379 watch --cluster default --json";

/// `meshline doctor --help`.
pub const DOCTOR: &str = "\
Examples:
  meshline --config seata.properties doctor
  meshline --config application.yml doctor order_tx_group --json";

/// `meshline register --help`.
pub const REGISTER: &str = "\
Examples:
  meshline --registry etcd3 --server http://127.0.0.1:2379 register default 10.0.0.1:8091 --ttl 10s
  meshline --registry redis --server 127.0.0.1:6379 register default 10.0.0.1:8091
Ends on Ctrl-C (SIGINT) or SIGTERM, removing the registration first.";

/// `meshline types --help`.
pub const TYPES: &str = "\
Examples:
  meshline types
  meshline types --porcelain
  meshline --json types";

/// `meshline completions --help`.
pub const COMPLETIONS: &str = "\
Examples:
  meshline completions bash > ~/.local/share/bash-completion/completions/meshline
  meshline completions zsh > ~/.zfunc/_meshline
  meshline completions fish > ~/.config/fish/completions/meshline.fish
For zsh, the folder must be on `fpath` (`fpath+=~/.zfunc` before `compinit` in ~/.zshrc).";

/// `meshline man --help`.
pub const MAN: &str = "\
Examples:
  meshline man > meshline.1
  meshline man --out-dir /usr/local/share/man/man1";

/// Writes the completion script for `shell` to standard output.
pub fn completions(shell: Shell) -> Result<(), RegistryError> {
    let mut cmd = crate::Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, "meshline", &mut out);
    std::io::stdout()
        .write_all(&out)
        .map_err(|e| RegistryError::Config(format!("writing the completions: {e}")))
}

/// Writes `meshline(1)` to standard output, or with `out_dir` one page per command
/// (`meshline.1`, `meshline-lookup.1`, ...) into that folder, naming each file written.
pub fn man(out_dir: Option<&Path>) -> Result<(), RegistryError> {
    let cmd = crate::Cli::command();
    match out_dir {
        None => {
            let mut out = Vec::new();
            clap_mangen::Man::new(cmd)
                .render(&mut out)
                .and_then(|()| std::io::stdout().write_all(&out))
                .map_err(|e| RegistryError::Config(format!("writing the man page: {e}")))
        }
        Some(dir) => {
            clap_mangen::generate_to(cmd, dir).map_err(|e| {
                RegistryError::Config(format!("writing the man pages to {}: {e}", dir.display()))
            })?;
            let mut names: Vec<String> = std::fs::read_dir(dir)
                .map_err(|e| RegistryError::Config(format!("{}: {e}", dir.display())))?
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| n.starts_with("meshline") && n.ends_with(".1"))
                .collect();
            names.sort();
            for n in names {
                println!("{}", dir.join(n).display());
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use crate::Cli;

    /// Every command's `--help` ends with examples, and every example parses: a flag or
    /// subcommand renamed without its example fails here.
    #[test]
    fn every_command_shows_examples_that_parse() {
        let root = Cli::command();
        let mut commands = vec![root.clone()];
        commands.extend(root.get_subcommands().cloned());
        assert!(commands.len() >= 8, "the root and its 7 subcommands");
        for cmd in commands {
            let name = cmd.get_name().to_string();
            let help = cmd
                .get_after_help()
                .unwrap_or_else(|| panic!("`{name}` has no after_help"))
                .to_string();
            let examples: Vec<&str> = help
                .lines()
                .filter_map(|l| l.strip_prefix("  meshline "))
                .collect();
            assert!(
                help.starts_with("Examples:\n") && !examples.is_empty(),
                "`{name}`: {help}"
            );
            for example in examples {
                // The command line, without what the shell does with its output.
                let line = example.split(['>', '|']).next().unwrap_or_default();
                let argv = std::iter::once("meshline").chain(line.split_whitespace());
                if let Err(e) = Cli::try_parse_from(argv.clone()) {
                    panic!("`{name}` example `meshline {example}`: {e}");
                }
                assert!(
                    name == "meshline" || argv.clone().any(|a| a == name),
                    "`{name}`'s example runs another command: {example}"
                );
            }
        }
    }
}
