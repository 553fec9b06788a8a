//! Figures a test measured, gathered across one run of `scripts/test.sh`.
//!
//! The fault tests measure what they bound (detection and recovery times, throughput
//! kept, shares of traffic) and `docs/faults.md` quotes those figures. A test's output
//! is captured by the test harness and shown only when it fails, so the figures of a
//! passing full run would be lost: [`report`] prints them and, when `TESTSH_FIGURES`
//! names a file (the test script sets it), appends them there too, each line behind the
//! test's name. The script prints that file at its end.
//!
//! (`TESTSH_`, not `MESHLINE_`: the configuration loader reads `MESHLINE_*` variables as
//! keys.)

use std::io::Write;

/// The variable naming the file figures are appended to.
pub const FIGURES_VAR: &str = "TESTSH_FIGURES";

/// Prints `text` to standard error and appends each of its lines, behind `[test]`, to
/// the file `TESTSH_FIGURES` names (if any). One write per call, in append mode, so the
/// lines of tests running at once do not interleave within a report. A file that cannot
/// be written is said on standard error and does not fail the test: the figures are a
/// record, the test's assertions are its verdict.
pub fn report(test: &str, text: &str) {
    eprintln!("{text}");
    if let Some(path) = std::env::var_os(FIGURES_VAR)
        && let Err(e) = append(std::path::Path::new(&path), test, text)
    {
        eprintln!("figures not recorded in {}: {e}", path.to_string_lossy());
    }
}

/// Appends `text`'s lines behind `[test]` to `path`, in one write.
fn append(path: &std::path::Path, test: &str, text: &str) -> std::io::Result<()> {
    let mut block = String::new();
    for line in text.lines() {
        block.push_str(&format!("[{test}] {line}\n"));
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?
        .write_all(block.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_are_appended_line_by_line_behind_the_test_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("figures.txt");
        append(&path, "a", "one\ntwo").unwrap();
        append(&path, "b", "three").unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "[a] one\n[a] two\n[b] three\n"
        );
        let missing = dir.path().join("no-such-dir/figures.txt");
        assert_eq!(
            append(&missing, "c", "x").unwrap_err().kind(),
            std::io::ErrorKind::NotFound
        );
    }
}
