//! `meshline completions <shell>` and `meshline man`: generated from the parser, they
//! name every subcommand `meshline --help` lists; bash's script completes for real.

use std::process::Command;

fn meshline(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_meshline"))
        .args(args)
        .output()
        .expect("run meshline");
    assert!(
        out.status.success(),
        "meshline {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// The subcommands `meshline --help` lists (its `Commands:` section), without `help`.
fn subcommands() -> Vec<String> {
    let help = meshline(&["--help"]);
    let section = help
        .split("Commands:\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no Commands: section in\n{help}"));
    let names: Vec<String> = section
        .lines()
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| *n != "help")
        .map(str::to_string)
        .collect();
    for expected in [
        "lookup",
        "watch",
        "doctor",
        "register",
        "types",
        "completions",
        "man",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} not in {names:?}"
        );
    }
    names
}

#[test]
fn completions_name_every_subcommand() {
    let subs = subcommands();
    for (shell, marker) in [
        ("bash", "complete -F _meshline"),
        ("zsh", "#compdef meshline"),
        ("fish", "complete -c meshline"),
    ] {
        let script = meshline(&["completions", shell]);
        assert!(
            script.contains(marker),
            "{shell}: no `{marker}` in\n{script}"
        );
        for sub in &subs {
            let named = match shell {
                // fish: `... -a "lookup" -d '...'`; bash: a case arm `meshline,lookup)`.
                "fish" => script.contains(&format!("-a \"{sub}\"")),
                "bash" => script.contains(&format!("meshline,{sub})")),
                _ => script.contains(&format!("'{sub}:")),
            };
            assert!(named, "{shell} completions do not name `{sub}`:\n{script}");
        }
        // Flags of a subcommand, too (fish spells a long flag `-l name`).
        for flag in ["porcelain", "ttl", "out-dir"] {
            let spelt = if shell == "fish" {
                format!("-l {flag}")
            } else {
                format!("--{flag}")
            };
            assert!(script.contains(&spelt), "{shell}: no `{spelt}`");
        }
    }
    let out = Command::new(env!("CARGO_BIN_EXE_meshline"))
        .args(["completions", "tcsh"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "an unknown shell is a usage error"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("[possible values: bash, elvish, fish, powershell, zsh]"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Loads the bash script into bash and asks it, as bash's completion does, what
/// `meshline re<TAB>` and `meshline types --p<TAB>` complete to.
#[test]
fn bash_completes_subcommands_and_flags() {
    let script = meshline(&["completions", "bash"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("meshline.bash");
    std::fs::write(&file, script).unwrap();
    let ask = |words: &str| -> String {
        let program = format!(
            "source '{}'; COMP_WORDS=({words}); COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 )); \
             COMP_LINE='{words}'; COMP_POINT=${{#COMP_LINE}}; \
             _meshline meshline \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"; \
             printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            file.display()
        );
        let out = Command::new("bash")
            .args(["--norc", "--noprofile", "-c", &program])
            .output()
            .expect("run bash");
        assert!(
            out.status.success(),
            "bash: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    assert_eq!(ask("meshline re"), "register\n");
    assert_eq!(ask("meshline types --p"), "--porcelain\n");
    assert_eq!(ask("meshline completions f"), "fish\n");
}

#[test]
fn man_page_documents_every_subcommand_with_examples() {
    let subs = subcommands();
    let page = meshline(&["man"]);
    assert!(page.starts_with(".ie \\n(.g .ds Aq"), "not roff:\n{page}");
    assert!(page.contains(".TH meshline 1"), "{page}");
    for sub in &subs {
        assert!(
            page.contains(&format!("meshline\\-{sub}(1)")),
            "meshline(1) does not list {sub}:\n{page}"
        );
    }
    assert!(page.contains("Examples:"), "{page}");

    let dir = tempfile::tempdir().unwrap();
    let listed = meshline(&["man", "--out-dir", dir.path().to_str().unwrap()]);
    let mut expected: Vec<String> = subs
        .iter()
        .map(|s| format!("meshline-{s}.1"))
        .chain(["meshline.1".to_string()])
        .collect();
    expected.sort();
    let mut written: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    written.sort();
    assert_eq!(written, expected);
    assert_eq!(listed.lines().count(), expected.len(), "{listed}");
    let register = std::fs::read_to_string(dir.path().join("meshline-register.1")).unwrap();
    assert!(register.contains("\\-\\-ttl"), "{register}");
    assert!(register.contains("Ctrl\\-C"), "{register}");
}
