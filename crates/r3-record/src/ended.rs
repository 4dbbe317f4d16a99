//! How a recorded program ended, as a shell says it.

/// How a program ended, as a shell says it: its exit code, or 128 + the number of the signal
/// that killed it (139 for a SIGSEGV), with that signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ended {
    /// What `r3 record` exits with: what `$?` would be after the program run from a shell.
    pub code: i32,
    pub signal: Option<i32>,
    pub core_dumped: bool,
}

impl Ended {
    /// A program that exited with `code`.
    pub fn exited(code: i32) -> Ended {
        Ended {
            code,
            signal: None,
            core_dumped: false,
        }
    }

    pub fn of(status: std::process::ExitStatus) -> Ended {
        use std::os::unix::process::ExitStatusExt;
        match (status.code(), status.signal()) {
            (Some(code), _) => Ended::exited(code),
            (None, Some(n)) => Ended {
                code: 128 + n,
                signal: Some(n),
                core_dumped: status.core_dumped(),
            },
            // Neither an exit nor a signal (a stopped child, which `wait` does not report).
            (None, None) => Ended::exited(1),
        }
    }

    /// `the program was killed by SIGSEGV (signal 11)`, where a signal ended it.
    pub fn killed(&self) -> Option<String> {
        let n = self.signal?;
        let name = signal_name(n).map_or(format!("signal {n}"), |s| format!("{s} (signal {n})"));
        Some(format!(
            "the program was killed by {name}{}",
            if self.core_dumped {
                ", core dumped"
            } else {
                ""
            }
        ))
    }
}

/// The name of Linux signal `n` (the numbers of x86-64 and arm64 alike).
pub fn signal_name(n: i32) -> Option<String> {
    const NAMES: &str = "HUP INT QUIT ILL TRAP ABRT BUS FPE KILL USR1 SEGV USR2 PIPE ALRM TERM \
         STKFLT CHLD CONT STOP TSTP TTIN TTOU URG XCPU XFSZ VTALRM PROF WINCH IO PWR SYS";
    match n {
        1..=31 => NAMES
            .split_whitespace()
            .nth(n as usize - 1)
            .map(|s| format!("SIG{s}")),
        34..=64 => Some(format!("SIGRTMIN+{}", n - 34)),
        _ => None,
    }
}

/// The line `r3 record` ends with when a signal ended the program, as a shell would report it.
pub fn ended_text(e: &Ended) -> Option<String> {
    e.killed()
        .map(|why| format!("r3: {why}; exit status {}, as a shell gives it\n", e.code))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_s_end_is_the_status_a_shell_gives() {
        use std::os::unix::process::ExitStatusExt;
        // Raw wait statuses: exit code 3; killed by SIGSEGV with a core; by SIGABRT; by SIGKILL.
        let of = |raw| Ended::of(std::process::ExitStatus::from_raw(raw));
        assert_eq!(of(3 << 8), Ended::exited(3));
        assert_eq!(ended_text(&of(3 << 8)), None);
        let segv = of(11 | 0x80);
        assert_eq!(
            (segv.code, segv.signal, segv.core_dumped),
            (139, Some(11), true)
        );
        assert_eq!(
            ended_text(&segv).unwrap(),
            "r3: the program was killed by SIGSEGV (signal 11), core dumped; exit status 139, as a shell gives it\n"
        );
        assert_eq!(of(6).code, 134);
        assert_eq!(
            of(6).killed().unwrap(),
            "the program was killed by SIGABRT (signal 6)"
        );
        assert_eq!(of(9).code, 137);
        assert_eq!(signal_name(35).as_deref(), Some("SIGRTMIN+1"));
        assert_eq!(signal_name(99), None);
    }
}
