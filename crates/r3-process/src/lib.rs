//! r3's own child processes: the work that may crash or hang (LLVM on a strange pipeline, a
//! kernel on the GPU, IR processing inside a user's build) runs in `r3 __<role>`, a child
//! of r3, so that a crash or a hang costs that child and never r3 or the build.
//!
//! One protocol for every role: the parent sends JSON messages, one per line, on the child's
//! stdin; the child answers with JSON messages, one per line, on its stdout; lines that are
//! not a message (a library printing) are skipped. Every wait has a limit, after which the
//! child is killed; a child that ends by a signal is said to have crashed. No LLVM, no CUDA.

use serde::de::DeserializeOwned;
use serde::Serialize;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

pub mod timeline;

/// The r3 executable that runs the children: this process's own.
pub fn current_r3() -> std::io::Result<PathBuf> {
    std::env::current_exe()
}

/// What happens to a child's stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stderr {
    /// It goes where r3's own goes (a worker's notes reach the user).
    Inherit,
    /// It is kept, for the error of a child that failed (`Exit::stderr`).
    Keep,
}

/// A running child. Dropping it kills it.
pub struct Child {
    child: std::process::Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    stderr: Option<std::thread::JoinHandle<String>>,
}

/// Why no answer came.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoAnswer {
    /// Nothing within the limit; the child was killed.
    TimedOut(Duration),
    /// The child closed its stdout (it ended, or is ending).
    Ended,
}

/// How a child ended.
#[derive(Debug)]
pub struct Exit {
    pub status: ExitStatus,
    /// Its stderr, where it was kept.
    pub stderr: String,
}

impl Exit {
    /// The signal that ended it, if one did.
    pub fn signal(&self) -> Option<i32> {
        std::os::unix::process::ExitStatusExt::signal(&self.status)
    }
}

impl Child {
    /// Starts `exe` with `args` (the role, e.g. `__lower`).
    pub fn spawn(exe: &Path, args: &[&str], stderr: Stderr) -> std::io::Result<Child> {
        Child::spawn_with_env(exe, args, stderr, &[])
    }

    /// [`Child::spawn`], with these variables added to the child's environment.
    pub fn spawn_with_env(
        exe: &Path,
        args: &[&str],
        stderr: Stderr,
        env: &[(&str, &std::ffi::OsStr)],
    ) -> std::io::Result<Child> {
        let mut child = Command::new(exe)
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(match stderr {
                Stderr::Inherit => Stdio::inherit(),
                Stderr::Keep => Stdio::piped(),
            })
            .spawn()?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("stdout is piped");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        // Read as it comes, so that a child that writes much to stderr never blocks on it.
        let stderr = child.stderr.take().map(|mut e| {
            std::thread::spawn(move || {
                let mut s = String::new();
                let _ = e.read_to_string(&mut s);
                s
            })
        });
        Ok(Child {
            child,
            stdin,
            lines,
            stderr,
        })
    }

    /// Sends one message. An error means the child no longer reads (it ended).
    pub fn send<T: Serialize>(&mut self, msg: &T) -> std::io::Result<()> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::BrokenPipe))?;
        let mut line = serde_json::to_vec(msg).map_err(std::io::Error::other)?;
        line.push(b'\n');
        stdin.write_all(&line).and_then(|()| stdin.flush())
    }

    /// Closes the child's stdin: it has been sent everything.
    pub fn close(&mut self) {
        self.stdin = None;
    }

    /// The next message within `limit`; lines that are not one are skipped. On a timeout the
    /// child is killed.
    pub fn recv<T: DeserializeOwned>(&mut self, limit: Duration) -> Result<T, NoAnswer> {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => match serde_json::from_str(&line) {
                    Ok(msg) => return Ok(msg),
                    Err(_) => continue,
                },
                Err(RecvTimeoutError::Timeout) => {
                    self.kill();
                    return Err(NoAnswer::TimedOut(limit));
                }
                Err(RecvTimeoutError::Disconnected) => return Err(NoAnswer::Ended),
            }
        }
    }

    /// Waits for the child to end, at most `limit` (then it is killed and None).
    pub fn finish(mut self, limit: Duration) -> Option<Exit> {
        self.close();
        let deadline = Instant::now() + limit;
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(s)) => break s,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(2))
                }
                _ => {
                    self.kill();
                    return None;
                }
            }
        };
        let stderr = self
            .stderr
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        Some(Exit { status, stderr })
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The child's side: the next message on stdin, or None at its end (or on a line that is no
/// message of this kind, with the error).
pub fn read_request<T: DeserializeOwned>(
    input: &mut impl BufRead,
) -> Option<Result<T, serde_json::Error>> {
    let mut line = String::new();
    match input.read_line(&mut line) {
        Ok(0) | Err(_) => None,
        Ok(_) => Some(serde_json::from_str(&line)),
    }
}

/// The child's side: one message on `out`, flushed.
pub fn reply<T: Serialize>(out: &mut impl Write, msg: &T) -> std::io::Result<()> {
    serde_json::to_writer(&mut *out, msg)?;
    out.write_all(b"\n")?;
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str, stderr: Stderr) -> Child {
        Child::spawn(Path::new("/bin/sh"), &["-c", script], stderr).unwrap()
    }

    #[test]
    fn messages_go_both_ways_and_stray_lines_are_skipped() {
        let mut c = sh(
            "read x; echo 'a library says hi'; echo \"$x\"",
            Stderr::Keep,
        );
        c.send(&serde_json::json!({"n": 3})).unwrap();
        let got: serde_json::Value = c.recv(Duration::from_secs(5)).unwrap();
        assert_eq!(got["n"], 3);
        let exit = c.finish(Duration::from_secs(5)).unwrap();
        assert!(exit.status.success());
    }

    #[test]
    fn a_child_that_says_nothing_in_time_is_killed() {
        let mut c = sh("sleep 30", Stderr::Keep);
        let t = Instant::now();
        let r: Result<serde_json::Value, _> = c.recv(Duration::from_millis(200));
        assert_eq!(
            r.unwrap_err(),
            NoAnswer::TimedOut(Duration::from_millis(200))
        );
        assert!(t.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn a_child_that_ends_is_an_end_and_its_stderr_and_signal_are_kept() {
        let mut c = sh("echo 'why it failed' >&2; kill -SEGV $$", Stderr::Keep);
        let r: Result<serde_json::Value, _> = c.recv(Duration::from_secs(5));
        assert_eq!(r.unwrap_err(), NoAnswer::Ended);
        let exit = c.finish(Duration::from_secs(5)).unwrap();
        assert_eq!(exit.signal(), Some(11));
        assert_eq!(exit.stderr.trim(), "why it failed");
    }

    #[test]
    fn a_child_that_does_not_end_in_time_is_killed() {
        let c = sh("sleep 30", Stderr::Keep);
        let t = Instant::now();
        assert!(c.finish(Duration::from_millis(200)).is_none());
        assert!(t.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn much_stderr_does_not_block_the_child() {
        let c = sh(
            "i=0; while [ $i -lt 4000 ]; do echo 'a long line of warnings from a library' >&2; i=$((i+1)); done",
            Stderr::Keep,
        );
        let exit = c.finish(Duration::from_secs(20)).unwrap();
        assert!(exit.status.success());
        assert_eq!(exit.stderr.lines().count(), 4000);
    }

    #[test]
    fn requests_are_read_a_line_at_a_time_until_the_end() {
        let mut input = std::io::Cursor::new(b"{\"a\":1}\nnot json\n".to_vec());
        let first: serde_json::Value = read_request(&mut input).unwrap().unwrap();
        assert_eq!(first["a"], 1);
        assert!(read_request::<serde_json::Value>(&mut input)
            .unwrap()
            .is_err());
        assert!(read_request::<serde_json::Value>(&mut input).is_none());
        let mut out = Vec::new();
        reply(&mut out, &serde_json::json!({"b": 2})).unwrap();
        assert_eq!(out, b"{\"b\":2}\n");
    }
}

/// Why [`run_limited`] has no exit to give.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunError {
    #[error("cannot run {program}: {error}")]
    Start { program: String, error: String },
    #[error("{program} took longer than {} s and was stopped", .limit.as_secs())]
    TimedOut { program: String, limit: Duration },
}

/// Runs a tool to its end (a compiler: no protocol, stdout unused) within `limit`, after which
/// it is killed; its exit and its stderr.
pub fn run_limited(mut command: Command, limit: Duration) -> Result<Exit, RunError> {
    let program = command.get_program().to_string_lossy().into_owned();
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| RunError::Start {
            program: program.clone(),
            error: e.to_string(),
        })?;
    let mut err = child.stderr.take().expect("stderr is piped");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if start.elapsed() > limit => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(RunError::TimedOut { program, limit });
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => {
                return Err(RunError::Start {
                    program,
                    error: e.to_string(),
                })
            }
        }
    };
    Ok(Exit {
        status,
        stderr: reader.join().unwrap_or_default(),
    })
}
