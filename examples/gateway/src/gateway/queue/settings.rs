//! The `queue.*` settings.

use crate::gateway::settings::off_or_count;

/// The `queue.*` settings (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueSettings {
    /// New sessions admitted a second (0: no rate gate).
    pub admit_per_sec: u32,
    /// Admitted at once (0: `admit_per_sec`).
    pub admit_burst: u32,
    /// Connected players at most (0: no cap).
    pub max_online: usize,
    /// Clients waiting at most (0: nobody waits; over the gate means refused).
    pub max_length: usize,
}

impl Default for QueueSettings {
    fn default() -> Self {
        QueueSettings {
            admit_per_sec: 500,
            admit_burst: 0,
            max_online: 50_000,
            max_length: 20_000,
        }
    }
}

impl QueueSettings {
    /// No gate: every verified client is admitted at once.
    pub fn off() -> Self {
        QueueSettings {
            admit_per_sec: 0,
            admit_burst: 0,
            max_online: 0,
            max_length: 0,
        }
    }

    /// Sets one `queue.<key>` (normalised: lower case, no `-` or `_`).
    pub(crate) fn set(&mut self, key: &str, v: &str) -> Result<(), String> {
        match key {
            "admitpersec" => self.admit_per_sec = off_or_count(v)?,
            "admitburst" => self.admit_burst = off_or_count(v)?,
            "maxonline" => self.max_online = off_or_count(v)?,
            "maxlength" => self.max_length = off_or_count(v)?,
            _ => return Err("unknown queue setting".into()),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_keys() {
        let mut s = QueueSettings::default();
        s.set("admitpersec", "50").unwrap();
        s.set("maxonline", "0").unwrap();
        s.set("maxlength", "10").unwrap();
        assert_eq!((s.admit_per_sec, s.max_online, s.max_length), (50, 0, 10));
        assert!(
            s.set("admitpersec", "fast")
                .unwrap_err()
                .contains("whole number")
        );
        assert!(s.set("colour", "1").unwrap_err().contains("unknown"));
    }
}
