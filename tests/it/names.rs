//! Names as people write them, and names that resolve to what the builds contain (issue 59,
//! items 3 and 4): an edited kernel's old version is listed apart and never chosen by a name,
//! `r3 gc` removes it; `scale_kernel<float>`, the full demangled name and a unique prefix all
//! name a template kernel; `tune --simulate` refuses a word that names no stored kernel.

use crate::support::*;
use r3::store::Store;
use std::path::{Path, PathBuf};

const DOT: &str = "__global__ void dot_kernel(const float *x, const float *y, float *out, int n) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) atomicAdd(out, x[i] * y[i]);\n}\n";
const DOT_EDITED: &str = "__global__ void dot_kernel(const float *x, const float *y, float *out, int n) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) atomicAdd(out, 2.0f * x[i] * y[i]);\n}\n";
const SCALE: &str = "template <typename T> __global__ void scale_kernel(T *x, int n) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) x[i] *= T(2);\n}\ntemplate __global__ void scale_kernel<float>(float *, int);\ntemplate __global__ void scale_kernel<double>(double *, int);\n";

/// Writes `src` as `dir/name` and compiles it with r3-clang++ (`-c`) into `dir/store`.
fn compile(dir: &Path, name: &str, src: &str) -> PathBuf {
    std::fs::write(dir.join(name), src).unwrap();
    let store = dir.join("store");
    let out = cuda_driver(&driver_links(dir), &store)
        .args(["-c", name, "-o"])
        .arg(format!("{name}.o"))
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    store
}

/// `r3 ARGS` on the store under `dir`, and its output (stdout, stderr) with the temporary
/// directory and the hashes masked, for snapshots.
fn masked(dir: &Path, text: &str) -> String {
    let d = regex::Regex::new(&regex::escape(&dir.display().to_string())).unwrap();
    let hash = regex::Regex::new(r"\b[0-9a-f]{16}\b").unwrap();
    let short = regex::Regex::new(r"\[[0-9a-f]{8,12}\]").unwrap();
    let bytes = regex::Regex::new(r"\b[0-9.]+ (B|KiB|MiB)\b").unwrap();
    let text = d.replace_all(text, "[DIR]");
    let text = hash.replace_all(&text, "[HASH]");
    let text = short.replace_all(&text, "[SHORT]");
    bytes.replace_all(&text, "[BYTES]").into_owned()
}

#[test]
fn an_edited_and_reverted_kernel_resolves_to_the_current_version() {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path();
    compile(dir, "dot.cu", DOT);
    let store = compile(dir, "dot.cu", DOT_EDITED);
    // Between the two compiles the clock moves on; the revert's unit is the newest file.
    std::thread::sleep(std::time::Duration::from_millis(20));
    compile(dir, "dot.cu", DOT);
    let st = Store::open(&store).unwrap();
    let kernels = st.kernels().unwrap();
    assert_eq!(kernels.len(), 2, "the first and the edited version");
    let index = st.index().unwrap();
    let current = index.select_one("dot_kernel", None).unwrap().hash.clone();
    let old: Vec<String> = index.old().iter().map(|k| k.hash.to_string()).collect();
    assert_eq!(old.len(), 1);
    assert_ne!(old[0], current.as_str());
    let unit = &st.units().unwrap()[0];
    assert_eq!(
        unit.kernels["sm_90"],
        std::slice::from_ref(&current),
        "the unit holds the revert"
    );

    // Every command takes the name for the current version; the old one only by its hash.
    let s = store.to_str().unwrap();
    let dry = |word: &str| {
        r3(
            &["tune", "--dry-run", word, "--budget", "1", "--r3-store", s],
            dir,
        )
    };
    let out = dry("dot_kernel");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out).matches("dot_kernel(").count(),
        1,
        "{}",
        stdout(&out)
    );
    let out = dry(&old[0][..8]);
    assert!(out.status.success(), "{}", stderr(&out));

    // `r3 kernels` lists the old version apart, `r3 status` says what it is.
    let listing = r3(&["kernels", "--r3-store", s], dir);
    let text = stdout(&listing);
    let (now, then) = text.split_once("\nold versions (").expect(&text);
    assert!(
        now.contains(current.as_str()) && !now.contains(&old[0]),
        "{text}"
    );
    assert!(then.contains(&old[0]), "{text}");
    let status = r3(&["status", "--r3-store", s], dir);
    assert!(
        stdout(&status).contains("old versions: 1 kernel(s)") && stdout(&status).contains("r3 gc"),
        "{}",
        stdout(&status)
    );

    // `r3 gc` says what it would remove, removes it with --yes, and the name still resolves.
    let plan = r3(&["gc", "--r3-store", s], dir);
    assert!(plan.status.success(), "{}", stderr(&plan));
    insta::assert_snapshot!("gc_dry_run", masked(dir, &stdout(&plan)));
    assert_eq!(Store::open(&store).unwrap().kernels().unwrap().len(), 2);
    let done = r3(&["gc", "--yes", "--r3-store", s], dir);
    assert!(done.status.success(), "{}", stderr(&done));
    assert!(stdout(&done).starts_with("removed:\n"), "{}", stdout(&done));
    let st = Store::open(&store).unwrap();
    let left: Vec<String> = st
        .kernels()
        .unwrap()
        .iter()
        .map(|k| k.hash.to_string())
        .collect();
    assert_eq!(left, [current.to_string()]);
    assert!(!store.join(r3::store::gc::STAGING).exists());
    let again = r3(&["gc", "--r3-store", s], dir);
    assert!(
        stdout(&again).starts_with("nothing to remove"),
        "{}",
        stdout(&again)
    );
    assert!(dry("dot_kernel").status.success());
}

#[test]
fn template_kernels_go_by_the_names_people_write() {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path();
    let store = compile(dir, "scale.cu", SCALE);
    let s = store.to_str().unwrap();
    let index = Store::open(&store).unwrap().index().unwrap();
    let float = index.select_one("scale_kernel<float>", None).unwrap();
    assert_eq!(
        float.signature.demangled,
        "void scale_kernel<float>(float*, int)"
    );
    for word in [
        "void scale_kernel<float>(float*, int)",
        "scale_kernel<float>(float*, int)",
        "scale_kernel<f",
        &float.hash[..6],
        &float.signature.name,
    ] {
        assert_eq!(
            index.select_one(word, None).unwrap().hash,
            float.hash,
            "{word}"
        );
    }
    // Both instantiations share the bare name: it lists them, as does a prefix of both.
    for word in ["scale_kernel", "scale_k"] {
        let e = index.select_one(word, None).unwrap_err().to_string();
        assert!(
            e.contains("scale_kernel<float>") && e.contains("scale_kernel<double>"),
            "{e}"
        );
    }
    // The CLI takes them as the index does.
    let out = r3(
        &[
            "tune",
            "--dry-run",
            "scale_kernel<double>",
            "--budget",
            "1",
            "--r3-store",
            s,
        ],
        dir,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("scale_kernel<double>(double*, int)"),
        "{}",
        stdout(&out)
    );
}

/// A landscape table for `--simulate`; its path.
fn table(dir: &Path) -> String {
    use r3::remix::sim::{synthetic, Family};
    let path = dir.join("land.json");
    std::fs::write(
        &path,
        serde_json::to_string(&synthetic(Family::Knobs, 0)).unwrap(),
    )
    .unwrap();
    path.to_string_lossy().into_owned()
}

#[test]
fn simulate_refuses_a_name_that_is_no_stored_kernel() {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path();
    let store = compile(dir, "scale.cu", SCALE);
    let t = &table(dir);
    let tune = |args: &[&str]| {
        let mut all = vec!["tune", "--simulate", t, "--budget", "12", "--batch", "4"];
        all.extend_from_slice(args);
        r3(&all, dir)
    };
    let out = tune(&["scale_kernl<float>"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("`scale_kernl<float>` names no stored kernel")
            && err.contains("--landscape-name 'scale_kernl<float>'")
            && err.contains("r3 kernels"),
        "{err}"
    );
    assert!(!store.join("trials").exists(), "no phantom search");
    // A stored kernel by the name people write: its search is under its hash, and its best
    // is one line of edits of -O3, not the 5 KB pipeline (issue 59, item 8).
    let out = tune(&["scale_kernel<float>"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let best = text.lines().find(|l| l.starts_with("best: ")).expect(&text);
    assert!(best.chars().count() < 600 && best.contains("-O3"), "{best}");
    let float = Store::open(&store)
        .unwrap()
        .index()
        .unwrap()
        .select_one("scale_kernel<float>", None)
        .unwrap()
        .hash
        .clone();
    assert!(store.join("trials").join(float.as_str()).is_dir());
    // A name of its own, said so.
    let out = tune(&["--landscape-name", "my-landscape"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(store.join("trials/my-landscape").is_dir());
    // --landscape-name goes with --simulate, and instead of a kernel.
    let out = r3(
        &["tune", "--landscape-name", "x", "--dry-run", "--all"],
        dir,
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let out = tune(&["scale_kernel<float>", "--landscape-name", "x"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let trials: Vec<String> = std::fs::read_dir(store.join("trials"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(trials.len(), 2, "{trials:?}");
}
