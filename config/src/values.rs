//! Value syntax shared by every key: durations, byte sizes, booleans, numbers, lists.

use std::time::Duration;

pub(super) fn nonempty(v: &str) -> Result<String, String> {
    let t = v.trim();
    if t.is_empty() {
        Err("must not be empty".into())
    } else {
        Ok(t.to_string())
    }
}

pub(super) fn split_list(v: &str) -> Vec<String> {
    v.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

pub(super) fn parse_bool(v: &str) -> Result<bool, String> {
    match v.trim().to_ascii_lowercase().as_str() {
        "true" | "yes" | "on" | "1" => Ok(true),
        "false" | "no" | "off" | "0" => Ok(false),
        _ => Err("expected true or false".into()),
    }
}

/// The longest duration any key accepts: 365 days.
///
/// Every configured duration ends up added to an `Instant` (a deadline, a session
/// timeout plus a connect timeout); `Instant + Duration` panics on overflow, and a
/// bare `18446744073709551615` is a valid millisecond count. No registry timeout or
/// period means anything beyond a year, so longer values are refused with a message
/// rather than panicking later.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

fn capped(d: Duration, t: &str) -> Result<Duration, String> {
    if d > MAX_DURATION {
        Err(format!("`{t}` is longer than the maximum of 365 days"))
    } else {
        Ok(d)
    }
}

/// Bare numbers are milliseconds; otherwise humantime text (`10s`, `1m 30s`, `500ms`).
/// At most [`MAX_DURATION`].
pub fn parse_duration(v: &str) -> Result<Duration, String> {
    let t = v.trim();
    if let Ok(ms) = t.parse::<u64>() {
        return capped(Duration::from_millis(ms), t);
    }
    let d = humantime::parse_duration(t)
        .map_err(|e| format!("expected milliseconds or a duration like `10s`: {e}"))?;
    capped(d, t)
}

/// A duration of a key Seata defines: a bare number counts `bare_unit`s (Seata's unit
/// for that key); otherwise humantime text. At most [`MAX_DURATION`].
pub(crate) fn parse_seata_duration(v: &str, bare_unit: Duration) -> Result<Duration, String> {
    let t = v.trim();
    if let Ok(n) = t.parse::<u64>() {
        let nanos = bare_unit.as_nanos().saturating_mul(u128::from(n));
        let too_long = || format!("`{t}` is longer than the maximum of 365 days");
        if nanos > MAX_DURATION.as_nanos() {
            return Err(too_long());
        }
        return u64::try_from(nanos)
            .map(Duration::from_nanos)
            .map_err(|_| too_long());
    }
    let d = humantime::parse_duration(t).map_err(|e| {
        format!("expected a number (Seata's unit for this key) or a duration like `10s`: {e}")
    })?;
    capped(d, t)
}

/// A duration that must carry its unit (`10s`, `500ms`): for keys only meshline has,
/// where a bare number would be ambiguous. At most [`MAX_DURATION`].
pub fn parse_duration_with_unit(v: &str) -> Result<Duration, String> {
    let t = v.trim();
    if t.parse::<u64>().is_ok() {
        return Err(format!(
            "`{t}` has no unit: write it with one, e.g. `{t}ms` or `{t}s`"
        ));
    }
    let d =
        humantime::parse_duration(t).map_err(|e| format!("expected a duration like `10s`: {e}"))?;
    capped(d, t)
}

/// A byte size: a bare number of bytes, or a number with `B`, `KiB`/`KB`/`K`,
/// `MiB`/`MB`/`M` or `GiB`/`GB`/`G` (all powers of 1024, any case), e.g. `8MiB`. Zero
/// is refused.
pub fn parse_bytes(v: &str) -> Result<usize, String> {
    let t = v.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("expected a size like `8MiB` or `65536`, got `{t}`"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        other => {
            return Err(format!(
                "unknown size unit `{other}` (use B, KiB, MiB or GiB)"
            ));
        }
    };
    let bytes = n
        .checked_mul(mult)
        .and_then(|b| usize::try_from(b).ok())
        .ok_or_else(|| format!("size `{t}` is too large"))?;
    if bytes == 0 {
        return Err("must be larger than 0".into());
    }
    Ok(bytes)
}
