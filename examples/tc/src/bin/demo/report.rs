//! The demo's report: the records checked against what the RMs saw in phase two, per
//! TC and per outcome, and the verdict.

use std::collections::{BTreeMap, HashSet};
use std::sync::Mutex;

use super::{Clients, Load, Outcome, PHASE, Record, Tc};

/// Reads what the RMs saw, checks every record of the run against it and prints the
/// report; true when everything checked out.
pub(super) fn report(tcs: &[Tc], victim: &Tc, load: &Load, clients: &Clients) -> bool {
    let seen = PhaseTwo::of(clients);
    let tally = Tally::of(&load.records, &seen, &victim.addr);
    print_table(tcs, victim, &tally.per_tc);
    print_consistency(victim, &seen, &tally);
    print_victim(victim, load, &tally);
    verdict(load, &tally)
}

/// What the RMs were asked in phase two, read once the run is over.
struct PhaseTwo {
    commits_stock: HashSet<String>,
    commits_account: HashSet<String>,
    rollbacks_stock: HashSet<String>,
    rollbacks_account: HashSet<String>,
}

/// The records checked against what the RMs saw.
#[derive(Default)]
struct Tally {
    /// Per TC: committed, rolled back, failed, as the TM saw them.
    per_tc: BTreeMap<String, [u64; 3]>,
    /// The dead TC's failed transactions: what the TM was told ...
    victim_told: BTreeMap<String, u64>,
    /// ... and what the RMs saw.
    victim_truth: BTreeMap<&'static str, u64>,
    live_failures: Vec<String>,
    inconsistent: Vec<String>,
    at_cleanup_lost: u64,
}

impl PhaseTwo {
    /// A copy of what both RMs were asked so far.
    fn of(clients: &Clients) -> PhaseTwo {
        let copy =
            |set: &Mutex<HashSet<String>>| set.lock().unwrap_or_else(|p| p.into_inner()).clone();
        PhaseTwo {
            commits_stock: copy(&clients.seen_stock.commits),
            commits_account: copy(&clients.seen_account.commits),
            rollbacks_stock: copy(&clients.seen_stock.rollbacks),
            rollbacks_account: copy(&clients.seen_account.rollbacks),
        }
    }
}

impl Tally {
    /// Counts every record per TC and checks it against `seen`; the victim's (at
    /// `victim_addr`) failures are told apart from the live TCs'.
    fn of(records: &[Record], seen: &PhaseTwo, victim_addr: &str) -> Tally {
        let mut t = Tally::default();
        for r in records {
            let tc = r.tc.clone().unwrap_or_else(|| "?".into());
            let xid = r.xid.as_deref().unwrap_or("");
            match &r.outcome {
                Outcome::Committed => {
                    t.row(&tc)[0] += 1;
                    if !seen.commits_account.contains(xid) {
                        t.inconsistent
                            .push(format!("{xid}: committed, but not at the account RM"));
                    } else if !seen.commits_stock.contains(xid) {
                        if tc == victim_addr {
                            // AT: its data was committed in phase one; phase two only
                            // deletes the undo log, and the dead TC's loop never sent it.
                            t.at_cleanup_lost += 1;
                        } else {
                            t.inconsistent
                                .push(format!("{xid}: committed, but not at the stock RM"));
                        }
                    }
                }
                Outcome::RolledBack => {
                    t.row(&tc)[1] += 1;
                    if seen.commits_stock.contains(xid) || seen.commits_account.contains(xid) {
                        t.inconsistent
                            .push(format!("{xid}: rolled back, but committed at an RM"));
                    }
                }
                Outcome::Failed(step, e) => {
                    t.row(&tc)[2] += 1;
                    if tc == victim_addr {
                        *t.victim_told
                            .entry(format!("{step}: {}", told(e)))
                            .or_default() += 1;
                        *t.victim_truth.entry(truth(r, seen)).or_default() += 1;
                    } else {
                        t.live_failures.push(format!(
                            "{} ({tc}) {step}: {e}",
                            r.xid.as_deref().unwrap_or("no xid")
                        ));
                    }
                }
            }
        }
        t
    }

    /// The counts of TC `tc` (committed, rolled back, failed).
    fn row(&mut self, tc: &str) -> &mut [u64; 3] {
        self.per_tc.entry(tc.to_string()).or_default()
    }
}

/// What the TM was told of a transaction that failed on the dead TC, from its error.
fn told(e: &str) -> &'static str {
    if e.contains("may have been delivered") {
        "written, then the TC died (\"may have been delivered\")"
    } else if e.contains("no longer knows")
        || e.contains("GlobalTransactionNotExist")
        || e.contains("Finished")
    {
        "another TC does not know it (its TC is gone)"
    } else {
        "other error"
    }
}

/// What a transaction that failed on the dead TC became, as the RMs saw it.
fn truth(r: &Record, seen: &PhaseTwo) -> &'static str {
    let xid = r.xid.as_deref().unwrap_or("");
    let (cs, ca) = (
        seen.commits_stock.contains(xid),
        seen.commits_account.contains(xid),
    );
    let (rs, ra) = (
        seen.rollbacks_stock.contains(xid),
        seen.rollbacks_account.contains(xid),
    );
    match (r.xid.is_some(), cs, ca, rs, ra) {
        (false, ..) => "never began (no XID came back)",
        (true, true, true, _, _) => "committed at both RMs (phase two ran before the TC died)",
        (true, _, _, true, true) => "rolled back at both RMs",
        (true, false, false, false, false) => {
            "no phase two at either RM: lost with the TC (not durable), branches left waiting"
        }
        // The TC died between its two phase-two requests: the half a
        // durable TC would finish on restart.
        _ => "phase two at one RM only (the TC died in between)",
    }
}

/// The per-TC table: what the TM saw on each TC, the killed one marked.
fn print_table(tcs: &[Tc], victim: &Tc, per_tc: &BTreeMap<String, [u64; 3]>) {
    println!();
    println!(
        "  {:<6} {:<22} {:>10} {:>12} {:>8}",
        "TC", "address", "committed", "rolled back", "failed"
    );
    println!("  {}", "-".repeat(62));
    for t in tcs {
        let row = per_tc.get(&t.addr).copied().unwrap_or_default();
        let name = if t.addr == victim.addr {
            format!("{} \u{2020}", t.name)
        } else {
            t.name.clone()
        };
        println!(
            "  {:<6} {:<22} {:>10} {:>12} {:>8}",
            name, t.addr, row[0], row[1], row[2]
        );
    }
    if let Some(row) = per_tc.get("?") {
        println!(
            "  {:<6} {:<22} {:>10} {:>12} {:>8}",
            "?", "(begin got no XID)", row[0], row[1], row[2]
        );
    }
    println!(
        "  \u{2020} killed {:.1} s into the run",
        PHASE.as_secs_f64()
    );
    println!();
}

/// What the RMs saw, and whether it matches what the TM was told.
fn print_consistency(victim: &Tc, seen: &PhaseTwo, tally: &Tally) {
    println!(
        "  phase two seen at the RMs: stock {} commits, {} rollbacks; account {} commits, {} rollbacks",
        seen.commits_stock.len(),
        seen.rollbacks_stock.len(),
        seen.commits_account.len(),
        seen.rollbacks_account.len()
    );
    println!(
        "  every transaction the TM saw committed was committed at both RMs, and none it saw rolled back was committed: {}",
        if tally.inconsistent.is_empty() {
            "yes".to_string()
        } else {
            format!("NO ({})", tally.inconsistent.len())
        }
    );
    for i in tally.inconsistent.iter().take(5) {
        println!("    {i}");
    }
    if tally.at_cleanup_lost > 0 {
        println!(
            "  {} committed on {} whose AT branch (stock) never got its BranchCommit: \
             the TC answered Committed at once and died before its background loop sent it; \
             the data was committed in phase one, only the undo log is left to clean",
            tally.at_cleanup_lost, victim.name
        );
    }
}

/// The killed TC's transactions that did not end as asked, and the ones begun after it.
fn print_victim(victim: &Tc, load: &Load, tally: &Tally) {
    println!(
        "  {} had {} transactions open when it died. Its transactions that did not end as asked:",
        victim.name, load.victim_open
    );
    if tally.victim_told.is_empty() {
        println!("    none");
    }
    println!("    what the TM was told:");
    for (what, n) in &tally.victim_told {
        println!("      {n:>5}  {what}");
    }
    println!("    what they became (what the RMs saw):");
    for (what, n) in &tally.victim_truth {
        println!("      {n:>5}  {what}");
    }
    let after = load.records.iter().filter(|r| r.after_kill).count();
    let after_ok = load
        .records
        .iter()
        .filter(|r| r.after_kill && !matches!(r.outcome, Outcome::Failed(..)))
        .count();
    println!(
        "  transactions begun after the kill: {after}, of which {after_ok} committed or rolled back as asked"
    );
    match load.left {
        Some(d) => println!(
            "  {} left the clients' alive set {:.1} ms after the kill",
            victim.name,
            d.as_secs_f64() * 1e3
        ),
        None => println!(
            "  {} was still in the alive set 2 s after the kill",
            victim.name
        ),
    }
}

/// The verdict (printed, and returned): no live TC's transaction failed, everything
/// was consistent, the victim left the alive set, and something was committed.
fn verdict(load: &Load, tally: &Tally) -> bool {
    let live_ok = tally.live_failures.is_empty();
    let ok = live_ok
        && tally.inconsistent.is_empty()
        && load.left.is_some()
        && tally.per_tc.values().map(|r| r[0]).sum::<u64>() > 0;
    println!(
        "  transactions on live TCs that failed: {}  => {}",
        tally.live_failures.len(),
        if ok { "OK" } else { "FAILED" }
    );
    for f in tally.live_failures.iter().take(5) {
        println!("    {f}");
    }
    ok
}
