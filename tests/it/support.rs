//! Helpers shared by the integration tests.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub fn r3_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_r3"))
}

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `r3 args…` with a private store and cache, so tests never touch the user's.
pub fn r3(args: &[&str], home: &Path) -> Output {
    Command::new(r3_bin())
        .args(args)
        .env("R3_STORE", home.join("store"))
        .env_remove("R3_CUDA_PATH")
        // The programs these tests record are shell commands or fake-GPU programs.
        .env("R3_RECORD_WITHOUT_GPU", "1")
        .output()
        .expect("r3 runs")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Says that the running test left out some or all of its checks for want of `capability`,
/// where cargo shows it (stderr, printed only if the test fails) and where
/// `scripts/audit-tests` reads it (a line in the file `R3_SKIP_LOG` names), so that a green run
/// still says what it did not check. A capability that `R3_REQUIRE` (comma-separated) names is
/// one this machine must have: `.ci/run` lists what CI has, and there a skip is a failure.
pub fn skip(capability: &str, reason: &str) {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("(unnamed thread)");
    let required = std::env::var("R3_REQUIRE").unwrap_or_default();
    assert!(
        !required.split(',').any(|c| c.trim() == capability),
        "{test} needs {capability}, which R3_REQUIRE={required} says this machine has: {reason}"
    );
    // One line each: scripts/audit-tests reads the log line by line.
    let line = format!(
        "{test}: skipped: {capability}: {}",
        reason.trim().replace('\n', "; ")
    );
    eprintln!("{line}");
    if let Some(log) = std::env::var_os("R3_SKIP_LOG").filter(|v| !v.is_empty()) {
        // One write of a whole line, appended: tests running at once do not mix their lines.
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap_or_else(|e| panic!("R3_SKIP_LOG={}: {e}", Path::new(&log).display()));
        file.write_all(format!("{line}\n").as_bytes())
            .unwrap_or_else(|e| panic!("R3_SKIP_LOG={}: {e}", Path::new(&log).display()));
    }
}

/// A directory holding `r3-clang++` and `r3-clang` links to the r3 under test.
pub fn driver_links(dir: &Path) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for name in ["r3-clang++", "r3-clang"] {
        let link = bin.join(name);
        match std::os::unix::fs::symlink(r3_bin(), &link) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                panic!("{}: {e}", link.display())
            }
            _ => {}
        }
    }
    bin
}

/// saxpy, the kernel the replay and report tests record and store.
pub const SAXPY: &str = "__global__ void saxpy(float a, const float *x, float *y, int n) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) y[i] = a * x[i] + y[i];\n}\n";

/// Compiles SAXPY with r3-clang++ in `dir`, capturing it into `dir/store`; returns the store.
/// A fake-GPU program (`tests/it/fixtures/<name>.c`, which includes r3's runtime, r3rt.c),
/// built as C into `dir/<name>`, with `extra` arguments for clang (a header to include).
pub fn fake_gpu_program(dir: &Path, name: &str, extra: &[String]) -> PathBuf {
    let clang = r3::toolchain::find_clang(false).unwrap().path;
    let cuda = r3::toolchain::find_cuda(None).unwrap().path;
    let exe = dir.join(name);
    let out = Command::new(clang)
        .args(["-x", "c", "-std=c11", "-O1", "-w", "-I"])
        .arg(repo().join("crates/r3-driver/src/runtime"))
        .arg("-I")
        .arg(cuda.join("include"))
        .args(extra)
        .arg(repo().join(format!("tests/it/fixtures/{name}.c")))
        .arg("-o")
        .arg(&exe)
        .args(["-l:libzstd.a", "-lpthread", "-ldl", "-lm"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    exe
}

pub fn saxpy_store(dir: &Path) -> PathBuf {
    let store = dir.join("store");
    std::fs::write(dir.join("saxpy.cu"), SAXPY).unwrap();
    let cuda = r3::toolchain::find_cuda(None).unwrap().path;
    let bin = driver_links(dir);
    let cuda_path = format!("--cuda-path={}", cuda.display());
    let args = [
        "-x",
        "cuda",
        &cuda_path,
        "--cuda-gpu-arch=sm_90",
        "-Wno-unknown-cuda-version",
        "-O3",
        "-c",
        "saxpy.cu",
        "-o",
        "saxpy.o",
    ];
    let out = Command::new(bin.join("r3-clang++"))
        .args(args)
        .current_dir(dir)
        .env("R3_STORE", &store)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    store
}

/// `r3-clang++` (a link in `links`) compiling CUDA for sm_90 at -O3 against the SDK r3 finds,
/// with its store in `store`; the caller adds inputs, outputs and the link line.
pub fn cuda_driver(links: &Path, store: &Path) -> Command {
    let cuda = r3::toolchain::find_cuda(None).unwrap().path;
    let mut cmd = Command::new(links.join("r3-clang++"));
    cmd.args([
        "-x",
        "cuda",
        "--cuda-gpu-arch=sm_90",
        "-Wno-unknown-cuda-version",
        "-O3",
    ])
    .arg(format!("--cuda-path={}", cuda.display()))
    .env("R3_STORE", store);
    cmd
}

/// The link arguments of a CUDA program against the SDK's static cudart.
pub fn cudart_link() -> Vec<String> {
    let cuda = r3::toolchain::find_cuda(None).unwrap().path;
    ["-lcudart_static", "-ldl", "-lrt", "-pthread"]
        .iter()
        .map(|s| s.to_string())
        .chain([format!("-L{}", cuda.join("lib").display())])
        .collect()
}

/// Every file under `dir`, depth first.
pub fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// The recorded H100 grid landscape of gemm_naive, unpacked into `dir`: a simulated GPU for
/// searches (`r3 tune --simulate`).
pub fn landscape(dir: &Path) -> PathBuf {
    let tgz = repo().join("bench/landscapes/grid-h100-2026-11-22.tgz");
    let ok = Command::new("tar")
        .arg("-xzf")
        .arg(&tgz)
        .arg("-C")
        .arg(dir)
        .args(["--wildcards", "*gemm_naive*"])
        .status()
        .unwrap();
    assert!(ok.success());
    walk(dir)
        .into_iter()
        .find(|p| p.to_string_lossy().contains("gemm_naive"))
        .unwrap()
}

/// One scripted answer: HTTP status, body, and a delay before answering.
pub struct Answer(pub u16, pub String, pub Duration);

pub fn chat(content: &str) -> Answer {
    let body = serde_json::json!({
        "choices": [{"message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 50},
    });
    Answer(200, body.to_string(), Duration::ZERO)
}

/// A loopback server answering chat completions from a script, one connection at a time;
/// returns its URL and the requests it got (head and body).
pub fn mock_server(script: Vec<Answer>) -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        let mut answers = script.into_iter();
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let answer = answers
                .next()
                .unwrap_or_else(|| Answer(500, "script ran out".into(), Duration::ZERO));
            let log = log.clone();
            // Each connection on its own thread: a slow answer must not hold up the next.
            std::thread::spawn(move || answer_one(stream, answer, &log));
        }
    });
    (url, seen)
}

fn answer_one(mut stream: std::net::TcpStream, answer: Answer, log: &Mutex<Vec<String>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut head = String::new();
    let mut len = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().unwrap_or(0);
        }
        head.push_str(&line);
    }
    let mut body = vec![0u8; len];
    let _ = reader.read_exact(&mut body);
    log.lock()
        .unwrap()
        .push(format!("{head}\n{}", String::from_utf8_lossy(&body)));
    let Answer(status, text, delay) = answer;
    std::thread::sleep(delay);
    let _ = write!(
        stream,
        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
        text.len()
    );
}

/// Where the attempt log of the one kernel `r3 evolve` worked on in `store` lies.
pub fn attempts_path(store: &Path) -> PathBuf {
    let dir = store.join("evolve");
    let kernel = std::fs::read_dir(&dir)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    kernel.join("attempts.jsonl")
}

/// That attempt log's text.
pub fn attempts_file(store: &Path) -> String {
    std::fs::read_to_string(attempts_path(store)).unwrap()
}

/// That log's events.
pub fn events(store: &Path) -> Vec<serde_json::Value> {
    attempts_file(store)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}
