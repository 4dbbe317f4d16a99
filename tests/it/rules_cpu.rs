//! Differential tests of `r3 evolve`'s rules without a GPU: kernels compiled as host C++
//! (`fixtures/cuda_on_cpu.h`: threads of a block as std::threads, shared memory as statics,
//! barriers as std::barrier), each rule's rewrite run beside the original on seeded inputs of
//! several sizes and block shapes, and the outputs compared element by element.
//!
//! Every rule so far keeps each floating-point operation and its order (restrict and the
//! pragmas change no expression; the register accumulator adds the same terms in the same
//! order; vector loads feed the same values to the same body), so outputs must match to the
//! bit. The programs are built with -ffp-contract=off so that "the same operations" means the
//! source's: a rewrite that splits `a += b * c` across statements is not told apart by an FMA
//! contracted in one place and not the other.

use crate::support::*;
use r3::evolve::rules::{self, Facts};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// Builds `code` (CUDA kernels and device functions, as a rewrite or a source file holds
/// them) with `main_body` as the body of `int main()`, as host C++ against
/// `fixtures/cuda_on_cpu.h`, runs it and returns its stdout. `defines` become `-D NAME=value`
/// (a template's knob values); `R3_PARAM(…)`/`R3_REQUIRE(…)` declarations in `code`, which
/// r3 replaces by `#define`s when it compiles, are blanked. Panics with the compiler's or the
/// program's diagnostics when either fails, or when the program runs past a minute (a barrier
/// some threads never reach).
///
/// ```ignore
/// let out = run_on_cpu(&tiled, "std::vector<float> a(64); …; r3cpu::launch(k, dim3(4), dim3(16), …);",
///                      &[("R3_TK", "16")]);
/// ```
pub fn run_on_cpu(code: &str, main_body: &str, defines: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let program = format!(
        "#line 1 \"kernels.cu\"\n{}\n#line 1 \"main\"\nint main() {{\n{main_body}\n  return 0;\n}}\n",
        without_knob_declarations(code)
    );
    let cpp = dir.path().join("k.cpp");
    std::fs::write(&cpp, &program).unwrap();
    let exe = dir.path().join("k");
    let compile = |prelude: &[&std::ffi::OsStr]| {
        let mut cc = Command::new(cxx());
        cc.args(["-x", "c++"]).args(CXXFLAGS).args(prelude);
        for (name, value) in defines {
            cc.arg(format!("-D{name}={value}"));
        }
        cc.arg(&cpp).arg("-o").arg(&exe).output().unwrap()
    };
    let header = repo().join(HEADER);
    // The precompiled header first; its failure (a stale one, say) costs a plain compile.
    let built = pch().is_some_and(|pch| {
        // Its name holds the header's text: the header's mtime (a checkout, a touch) says
        // nothing it does not.
        let unchecked = ["-Xclang", "-fno-validate-pch", "-include-pch"];
        let args: Vec<&std::ffi::OsStr> = unchecked.iter().map(|a| a.as_ref()).collect();
        compile(&[&args[..], &[pch.as_os_str()]].concat())
            .status
            .success()
    });
    if !built {
        let out = compile(&["-include".as_ref(), header.as_os_str()]);
        assert!(
            out.status.success(),
            "clang++ failed:\n{}\n--- program ---\n{program}",
            stderr(&out)
        );
    }
    let out = Command::new("timeout")
        .arg("60")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(
        out.status.code() != Some(124),
        "the program ran past a minute (a barrier that not all threads reach?)\n{program}"
    );
    assert!(
        out.status.success(),
        "the program failed ({}): {}\n{program}",
        out.status,
        stderr(&out)
    );
    stdout(&out)
}

const HEADER: &str = "tests/it/fixtures/cuda_on_cpu.h";
const CXXFLAGS: &[&str] = &[
    "-std=c++20",
    "-O1",
    "-pthread",
    "-ffp-contract=off",
    "-fno-strict-aliasing",
];

/// `cuda_on_cpu.h` precompiled, which takes most of a test program's compile: once per
/// header text, compiler and flags, kept in the test target's scratch directory for later
/// runs too. None where it cannot be built (each program then parses the header itself).
fn pch() -> Option<PathBuf> {
    static PCH: OnceLock<Option<PathBuf>> = OnceLock::new();
    PCH.get_or_init(|| {
        let header = repo().join(HEADER);
        let cxx = cxx();
        let key = format!(
            "{}\n{}\n{}",
            std::fs::read_to_string(&header).ok()?,
            cxx.display(),
            CXXFLAGS.join(" ")
        );
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        let pch = dir.join(format!(
            "cuda_on_cpu-{}.pch",
            r3::kernel::short_hash(key.as_bytes())
        ));
        if pch.exists() {
            return Some(pch);
        }
        // Built aside and renamed, so that a test run beside this one never reads half a file.
        let part = pch.with_extension(format!("pch.{}", std::process::id()));
        let ok = Command::new(&cxx)
            .args(["-x", "c++-header"])
            .args(CXXFLAGS)
            .arg(&header)
            .arg("-o")
            .arg(&part)
            .status()
            .ok()?
            .success();
        (ok && std::fs::rename(&part, &pch).is_ok()).then_some(pch)
    })
    .clone()
}

/// clang++ of the LLVM r3 is built with; a `clang` found instead links C++ through its
/// sibling.
fn cxx() -> PathBuf {
    let found = r3::toolchain::find_clang(true).unwrap().path;
    let name = found.file_name().unwrap().to_string_lossy().into_owned();
    if name.contains("++") {
        return found;
    }
    let sibling = found.with_file_name(name.replacen("clang", "clang++", 1));
    if sibling.exists() {
        sibling
    } else {
        found
    }
}

/// `code` with each `R3_PARAM(…)` or `R3_REQUIRE(…)` declaration (a line that starts with
/// one, through its closing parenthesis) blanked, newlines kept so that lines still match.
fn without_knob_declarations(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut open = 0i32;
    for line in code.split_inclusive('\n') {
        let t = line.trim_start();
        if open > 0 || t.starts_with("R3_PARAM(") || t.starts_with("R3_REQUIRE(") {
            open += line.matches('(').count() as i32 - line.matches(')').count() as i32;
            out.push_str(if line.ends_with('\n') { "\n" } else { "" });
        } else {
            out.push_str(line);
        }
    }
    out
}

/// How a variant's outputs must match the original's.
#[derive(Debug, Clone, Copy)]
pub enum Compare {
    /// Bit for bit.
    Exact,
    /// As f32s, within this relative difference (of the larger magnitude), for rewrites that
    /// reorder floating-point operations.
    Relative(f64),
}

/// Outputs of `r3cpu::dump` lines: (variant, what) → element bits.
pub fn dumped(stdout: &str) -> BTreeMap<(String, String), Vec<u32>> {
    let mut out = BTreeMap::new();
    for line in stdout.lines() {
        let Some((key, values)) = line.split_once(": ").or_else(|| line.split_once(':')) else {
            continue;
        };
        let Some((variant, what)) = key.split_once('|') else {
            continue;
        };
        let bits = values
            .split_whitespace()
            .map(|h| u32::from_str_radix(h, 16).unwrap())
            .collect();
        out.insert((variant.to_owned(), what.to_owned()), bits);
    }
    out
}

/// Asserts that every variant's every output matches the one `reference` printed.
pub fn assert_same(stdout: &str, reference: &str, how: Compare) {
    let outputs = dumped(stdout);
    let mut compared = 0;
    for ((variant, what), got) in &outputs {
        if variant == reference {
            continue;
        }
        let want = outputs
            .get(&(reference.to_owned(), what.clone()))
            .unwrap_or_else(|| panic!("{reference} printed no {what}"));
        assert_eq!(got.len(), want.len(), "{variant}: {what}: length");
        for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
            let (gf, wf) = (f32::from_bits(g) as f64, f32::from_bits(w) as f64);
            let ok = match how {
                Compare::Exact => g == w,
                Compare::Relative(tol) => g == w || (gf - wf).abs() <= tol * gf.abs().max(wf.abs()),
            };
            assert!(
                ok,
                "{variant} differs from {reference}: {what}[{i}] is {g:08x} (as f32 {gf:e}, as i32 {}), want {w:08x} (as f32 {wf:e}, as i32 {})",
                g as i32,
                w as i32
            );
        }
        compared += 1;
    }
    assert!(compared > 0, "no variant printed anything to compare");
}

/// A kernel to rewrite, and the C++ that runs one version of it on every case: the body of
/// a lambda `(auto kernel, const char *variant)` that launches `kernel` with
/// `r3cpu::launch` and prints its outputs with `r3cpu::dump(variant, …)`.
struct Subject {
    name: &'static str,
    source: &'static str,
    driver: &'static str,
}

/// y += A x, one thread per row, accumulating through y's pointer.
const MV: Subject = Subject {
    name: "mv",
    source: r#"__global__ void mv(int m, int n, const float *A, const float *x, float *y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < m) {
    for (int j = 0; j < n; j++) y[i] += A[i * n + j] * x[j];
  }
}"#,
    driver: r#"
  struct Case { int m, n, block, off; };
  for (Case c : {Case{37, 45, 32, 0}, Case{64, 64, 64, 0}, Case{45, 37, 16, 1}, Case{5, 3, 8, 0},
                 Case{64, 61, 48, 1}, Case{33, 8, 256, 0}}) {
    auto A = r3cpu::random_floats(c.m * c.n + c.off, 1);
    auto x = r3cpu::random_floats(c.n + c.off, 2);
    auto y = r3cpu::random_floats(c.m + c.off, 3);
    r3cpu::launch(kernel, dim3((c.m + c.block - 1) / c.block), dim3(c.block), c.m, c.n,
                  A.data() + c.off, x.data() + c.off, y.data() + c.off);
    char what[64];
    std::snprintf(what, sizeof what, "m=%d n=%d block=%d off=%d y", c.m, c.n, c.block, c.off);
    r3cpu::dump(variant, what, y.data(), y.size());
  }
"#,
};

/// C = A B as corpus/gemm_naive.cu computes it (there with `__restrict__`, which is a rule
/// here), in 2D blocks.
const GEMM_NAIVE: Subject = Subject {
    name: "gemm_naive_kernel",
    source: r#"__global__ void gemm_naive_kernel(int n, const float* A, const float* B, float* C) {
  int col = blockIdx.x * blockDim.x + threadIdx.x;
  int row = blockIdx.y * blockDim.y + threadIdx.y;
  if (row >= n || col >= n) return;
  float acc = 0.0f;
  for (int k = 0; k < n; ++k) acc += A[static_cast<size_t>(row) * n + k] * B[static_cast<size_t>(k) * n + col];
  C[static_cast<size_t>(row) * n + col] = acc;
}"#,
    driver: r#"
  struct Case { int n, bx, by, off; };
  for (Case c : {Case{37, 16, 16, 0}, Case{64, 16, 16, 0}, Case{45, 8, 4, 1}, Case{3, 4, 4, 0},
                 Case{64, 32, 8, 1}, Case{37, 5, 7, 0}}) {
    auto A = r3cpu::random_floats(c.n * c.n + c.off, 11);
    auto B = r3cpu::random_floats(c.n * c.n + c.off, 12);
    std::vector<float> C(c.n * c.n + c.off, -7.0f);
    dim3 grid((c.n + c.bx - 1) / c.bx, (c.n + c.by - 1) / c.by);
    r3cpu::launch(kernel, grid, dim3(c.bx, c.by), c.n, A.data() + c.off, B.data() + c.off,
                  C.data() + c.off);
    char what[64];
    std::snprintf(what, sizeof what, "n=%d block=%dx%d off=%d C", c.n, c.bx, c.by, c.off);
    r3cpu::dump(variant, what, C.data(), C.size());
  }
"#,
};

/// gemm_naive with 64-bit coordinates, each cast its own way: a coordinate is read through its
/// casts, and grouped outputs compute their coordinates in 64 bits as the original does.
const GEMM_WIDE: Subject = Subject {
    name: "gemm_naive_kernel",
    source: r#"__global__ void gemm_naive_kernel(int n, const float* A, const float* B, float* C) {
  size_t col = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t row = (size_t)blockIdx.y * blockDim.y + threadIdx.y;
  if (row >= n || col >= n) return;
  float acc = 0.0f;
  for (int k = 0; k < n; ++k) acc += A[row * n + k] * B[static_cast<size_t>(k) * n + col];
  C[row * n + col] = acc;
}"#,
    driver: GEMM_NAIVE.driver,
};

/// gemm_naive as textbooks write it, the block's extent a constant: blocks of another shape
/// leave holes in C (the constant is not their extent) and must run the original code.
const GEMM_TEXTBOOK: Subject = Subject {
    name: "gemm_naive_kernel",
    source: r#"#define TILE 16
__global__ void gemm_naive_kernel(int n, const float* A, const float* B, float* C) {
  int col = blockIdx.x * TILE + threadIdx.x;
  int row = TILE * blockIdx.y + threadIdx.y;
  if (row >= n || col >= n) return;
  float acc = 0.0f;
  for (int k = 0; k < n; ++k) acc += A[row * n + k] * B[k * n + col];
  C[row * n + col] = acc;
}"#,
    driver: GEMM_NAIVE.driver,
};

/// The lower triangle of C = alpha A A^T + beta C as corpus/syrk.cu computes it: threads
/// above the diagonal do nothing, the sum accumulates through C's pointer, A is not const.
const SYRK: Subject = Subject {
    name: "syrk_kernel",
    source: r#"__global__ void syrk_kernel(int n, int m, float alpha, float beta, float* A, float* C) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  int i = blockIdx.y * blockDim.y + threadIdx.y;
  if (i < n && j <= i) {
    C[i * n + j] *= beta;
    for (int k = 0; k < m; k++) C[i * n + j] += alpha * A[i * m + k] * A[j * m + k];
  }
}"#,
    driver: r#"
  struct Case { int n, m, bx, by, off; };
  for (Case c : {Case{37, 45, 16, 16, 0}, Case{64, 64, 32, 8, 0}, Case{45, 37, 8, 8, 1},
                 Case{20, 3, 4, 4, 0}, Case{64, 61, 16, 4, 1}, Case{30, 16, 16, 2, 0},
                 Case{128, 20, 32, 8, 1}}) {
    auto A = r3cpu::random_floats(c.n * c.m + c.off, 21, 0.0f, 1.0f);
    auto C = r3cpu::random_floats(c.n * c.n + c.off, 22, 0.0f, 1.0f);
    dim3 grid((c.n + c.bx - 1) / c.bx, (c.n + c.by - 1) / c.by);
    r3cpu::launch(kernel, grid, dim3(c.bx, c.by), c.n, c.m, 1.5f, 1.2f, A.data() + c.off,
                  C.data() + c.off);
    char what[64];
    std::snprintf(what, sizeof what, "n=%d m=%d block=%dx%d off=%d C", c.n, c.m, c.bx, c.by, c.off);
    r3cpu::dump(variant, what, C.data(), C.size());
  }
"#,
};

/// C = A B through 16 x 16 shared-memory tiles, two barriers per tile, threads outside C
/// returning only after the last barrier: the harness's shared memory and barriers, and the
/// literal-bound loop `unroll-constant` is for.
const GEMM_TILED: Subject = Subject {
    name: "gemm_tiled",
    source: r#"__global__ void gemm_tiled(int n, const float *A, const float *B, float *C) {
  __shared__ float As[16][16];
  __shared__ float Bs[16][16];
  int tx = threadIdx.x, ty = threadIdx.y;
  int col = blockIdx.x * 16 + tx, row = blockIdx.y * 16 + ty;
  float acc = 0.0f;
  for (int t = 0; t < n; t += 16) {
    As[ty][tx] = (row < n && t + tx < n) ? A[row * n + t + tx] : 0.0f;
    Bs[ty][tx] = (col < n && t + ty < n) ? B[(t + ty) * n + col] : 0.0f;
    __syncthreads();
    for (int k = 0; k < 16; k++) acc += As[ty][k] * Bs[k][tx];
    __syncthreads();
  }
  if (row >= n || col >= n) return;
  C[row * n + col] = acc;
}"#,
    driver: r#"
  struct Case { int n, off; };
  for (Case c : {Case{37, 0}, Case{64, 0}, Case{45, 1}, Case{3, 0}}) {
    auto A = r3cpu::random_floats(c.n * c.n + c.off, 31);
    auto B = r3cpu::random_floats(c.n * c.n + c.off, 32);
    std::vector<float> C(c.n * c.n + c.off, -7.0f);
    dim3 grid((c.n + 15) / 16, (c.n + 15) / 16);
    r3cpu::launch(kernel, grid, dim3(16, 16), c.n, A.data() + c.off, B.data() + c.off,
                  C.data() + c.off);
    char what[64];
    std::snprintf(what, sizeof what, "n=%d off=%d C", c.n, c.off);
    r3cpu::dump(variant, what, C.data(), C.size());
  }
"#,
};

/// Integer rows dotted with a vector from a column `lo` on: int4 loads of two pointers, one
/// of them at `k + BASE`, from a start that moves the first address.
const ROWDOT: Subject = Subject {
    name: "rowdot",
    source: r#"__global__ void rowdot(int rows, int cols, int lo, const int *M, const int *v, int *out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= rows) return;
  int s = 0;
  for (int j = lo; j < cols; ++j) {
    s += M[j + i * cols] * v[j];
    s ^= v[j] & 7;
  }
  out[i] = s;
}"#,
    driver: r#"
  struct Case { int rows, cols, lo, block, off; };
  for (Case c : {Case{37, 45, 0, 32, 0}, Case{64, 64, 1, 64, 0}, Case{45, 37, 3, 16, 1},
                 Case{9, 2, 0, 8, 0}, Case{64, 61, 4, 48, 0}, Case{16, 40, 2, 16, 1}}) {
    auto M = r3cpu::random_ints(c.rows * c.cols + c.off, 41, -50, 50);
    auto v = r3cpu::random_ints(c.cols + c.off, 42, -50, 50);
    std::vector<int> out(c.rows + c.off, -1);
    r3cpu::launch(kernel, dim3((c.rows + c.block - 1) / c.block), dim3(c.block), c.rows, c.cols,
                  c.lo, M.data() + c.off, v.data() + c.off, out.data() + c.off);
    char what[64];
    std::snprintf(what, sizeof what, "rows=%d cols=%d lo=%d block=%d off=%d out", c.rows, c.cols,
                  c.lo, c.block, c.off);
    r3cpu::dump(variant, what, out.data(), out.size());
  }
"#,
};

/// A row walk through a row pointer, as gemv_n is written (`const int *a = M + i * cols; …
/// a[j]`): the tiling template reads it through its base (`alias`).
const ROWPTR: Subject = Subject {
    name: "rowptr",
    source: r#"__global__ void rowptr(int rows, int cols, const int *M, const int *v, int *out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= rows) return;
  const int *a = M + static_cast<size_t>(i) * cols;
  int s = 0;
  for (int j = 0; j < cols; ++j) s += a[j] * (v[j] ^ 3);
  out[i] = s;
}"#,
    driver: r#"
  struct Case { int rows, cols, block; };
  for (Case c : {Case{128, 40, 32}, Case{100, 45, 32}, Case{64, 70, 16}, Case{96, 9, 32},
                 Case{40, 3, 32}}) {
    auto M = r3cpu::random_ints(c.rows * c.cols, 43, -50, 50);
    auto v = r3cpu::random_ints(c.cols, 44, -50, 50);
    std::vector<int> out(c.rows, -1);
    r3cpu::launch(kernel, dim3((c.rows + c.block - 1) / c.block), dim3(c.block), c.rows, c.cols,
                  M.data(), v.data(), out.data());
    char what[64];
    std::snprintf(what, sizeof what, "rows=%d cols=%d block=%d out", c.rows, c.cols, c.block);
    r3cpu::dump(variant, what, out.data(), out.size());
  }
"#,
};

/// Kendall-style pair counts: each thread counts concordant minus discordant row pairs of two
/// columns into one element, through branches (`+=` and `-=` at one index), and ties into a
/// second pointer; rows with equal values make every branch run.
const PAIR_COUNTS: Subject = Subject {
    name: "pairs",
    source: r#"__global__ void pairs(int n, int m, const float *y, float *tau, int *ties) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t < m * m) {
    int a = t / m, b = t % m;
    for (int i = 0; i < n - 1; i++) {
      for (int k = i + 1; k < n; k++) {
        float d = (y[i * m + a] - y[k * m + a]) * (y[i * m + b] - y[k * m + b]);
        if (d > 0.0f)
          tau[t] += 1.0f;
        else if (d < 0.0f)
          tau[t] -= 1.0f;
        else
          ties[t] += 1;
      }
    }
  }
}"#,
    driver: r#"
  struct Case { int n, m, block, off; };
  for (Case c : {Case{7, 5, 8, 0}, Case{12, 6, 32, 1}, Case{3, 4, 16, 0}, Case{9, 9, 64, 0},
                 Case{2, 3, 4, 1}}) {
    auto levels = r3cpu::random_ints(c.n * c.m + c.off, 51, 0, 3);
    std::vector<float> y(levels.begin(), levels.end());
    auto tau = r3cpu::random_floats(c.m * c.m + c.off, 52);
    auto ties = r3cpu::random_ints(c.m * c.m + c.off, 53, 0, 9);
    r3cpu::launch(kernel, dim3((c.m * c.m + c.block - 1) / c.block), dim3(c.block), c.n, c.m,
                  y.data() + c.off, tau.data() + c.off, ties.data() + c.off);
    char what[64];
    std::snprintf(what, sizeof what, "n=%d m=%d block=%d off=%d tau", c.n, c.m, c.block, c.off);
    r3cpu::dump(variant, what, tau.data(), tau.size());
    std::snprintf(what, sizeof what, "n=%d m=%d block=%d off=%d ties", c.n, c.m, c.block, c.off);
    r3cpu::dump(variant, what, ties.data(), ties.size());
  }
"#,
};

/// Y = X W^T with one flat thread index per output, its row and column derived by division and
/// remainder (the commonest naive dense layer), accumulating through Y's pointer; blocks span
/// several rows of Y where `out` is under the block's width.
const DENSE: Subject = Subject {
    name: "dense",
    source: r#"__global__ void dense(int rows, int in, int out, const float* X, const float* W, float* Y) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= rows * out) return;
  int b = t / out, o = t % out;
  Y[t] = 0.0f;
  for (int k = 0; k < in; ++k) Y[t] += X[static_cast<size_t>(b) * in + k] * W[static_cast<size_t>(o) * in + k];
}"#,
    driver: r#"
  struct Case { int rows, in, out, block, off; };
  for (Case c : {Case{3, 45, 300, 256, 0}, Case{5, 64, 256, 256, 1}, Case{2, 7, 100, 256, 0},
                 Case{4, 33, 129, 128, 0}, Case{7, 20, 90, 256, 1}}) {
    auto X = r3cpu::random_floats(c.rows * c.in + c.off, 61);
    auto W = r3cpu::random_floats(c.out * c.in + c.off, 62);
    std::vector<float> Y(c.rows * c.out + c.off, -3.0f);
    r3cpu::launch(kernel, dim3((c.rows * c.out + c.block - 1) / c.block), dim3(c.block), c.rows,
                  c.in, c.out, X.data() + c.off, W.data() + c.off, Y.data() + c.off);
    char what[80];
    std::snprintf(what, sizeof what, "rows=%d in=%d out=%d block=%d off=%d Y", c.rows, c.in, c.out,
                  c.block, c.off);
    r3cpu::dump(variant, what, Y.data(), Y.size());
  }
"#,
};

/// One slice of a tensor contraction, flat-indexed: the row `q` and column `p` derived from the
/// thread index, A read along its row (contiguous in `s`), C down a column (contiguous across
/// threads), neither pointer const.
const CONTRACT: Subject = Subject {
    name: "contract",
    source: r#"__global__ void contract(int r, int nq, int np, float* A, float* C, float* out) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t < nq * np) {
    int q = t / np, p = t % np;
    out[q * np + p] = 0.0f;
    for (int s = 0; s < np; s++) out[q * np + p] += A[(r * nq + q) * np + s] * C[s * np + p];
  }
}"#,
    driver: r#"
  struct Case { int r, nq, np, block, off; };
  for (Case c : {Case{1, 5, 64, 128, 0}, Case{0, 7, 40, 128, 1}, Case{2, 3, 13, 128, 0},
                 Case{1, 4, 33, 64, 0}}) {
    auto A = r3cpu::random_floats((c.r + 1) * c.nq * c.np + c.off, 71);
    auto C = r3cpu::random_floats(c.np * c.np + c.off, 72);
    std::vector<float> out(c.nq * c.np + c.off, 5.0f);
    r3cpu::launch(kernel, dim3((c.nq * c.np + c.block - 1) / c.block), dim3(c.block), c.r, c.nq,
                  c.np, A.data() + c.off, C.data() + c.off, out.data() + c.off);
    char what[80];
    std::snprintf(what, sizeof what, "r=%d nq=%d np=%d block=%d off=%d out", c.r, c.nq, c.np,
                  c.block, c.off);
    r3cpu::dump(variant, what, out.data(), out.size());
  }
"#,
};

/// Each rule's rewrite of `s`, and every rule applied in turn (each to the last one's
/// output, where it applies), as (label, code). The test's inputs are distinct allocations,
/// so the rewrites are made under the fact that the pointers are disjoint (the restrict rule
/// and vector loads in loops that store need it).
fn variants(s: &Subject) -> Vec<(String, String)> {
    let facts = Facts {
        pointers_disjoint: Some(true),
        ..Facts::default()
    };
    let mut out = Vec::new();
    let mut chained = s.source.to_owned();
    for r in rules::RULES {
        if let Some(text) = r.apply(s.source, &facts) {
            out.push((r.name.to_owned(), text));
        }
        if let Some(text) = r.apply(&chained, &facts) {
            chained = text;
        }
    }
    out.push(("all rules in turn".into(), chained));
    out
}

/// The knob values a template is built with here: each knob's first value.
fn knob_defines(code: &str) -> Vec<(String, String)> {
    code.lines()
        .filter_map(|l| l.trim().strip_prefix("R3_PARAM("))
        .filter_map(|rest| {
            let mut parts = rest.trim_end_matches(')').split(',').map(str::trim);
            Some((parts.next()?.to_owned(), parts.next()?.to_owned()))
        })
        .collect()
}

/// A vector-loads rewrite whose alignment check counts, through `r3_probe`, the threads that
/// took the vector branch and those that did not.
fn probed(rewrite: &str) -> String {
    rewrite
        .lines()
        .map(|l| match l.trim_start().strip_prefix("if (r3_k + 3 ") {
            Some(cond) => {
                let cond = cond.strip_suffix(" {").unwrap();
                format!("if (r3_probe(r3_k + 3 {cond}) {{\n")
            }
            None => format!("{l}\n"),
        })
        .collect()
}

/// The `taken N skipped M` line a program with `PROBE` prints: how often `r3_probe` saw
/// true and false.
fn probe_counts(stdout: &str) -> [i64; 2] {
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("taken "))
        .unwrap_or_else(|| panic!("no probe counts in:\n{stdout}"));
    let (taken, skipped) = line.split_once(" skipped ").unwrap();
    [taken.parse().unwrap(), skipped.parse().unwrap()]
}

const PROBE: &str = "static long r3_taken = 0, r3_skipped = 0;\n\
    static std::mutex r3_probe_lock;\n\
    static bool r3_probe(bool b) {\n\
      std::lock_guard<std::mutex> g(r3_probe_lock);\n\
      (b ? r3_taken : r3_skipped)++;\n\
      return b;\n\
    }\n";

/// Runs the original of `s` and each rule's variant in one program (each in a namespace of
/// its own), compares their outputs bit for bit, and checks that each rule of `must_apply`
/// had a variant. Where vector-loads applies, a probed copy of its variant runs too, and
/// both its branches must have been taken.
fn rule_variants_match_the_original(s: &Subject, must_apply: &[&str]) {
    let mut all = vec![("original".to_owned(), s.source.to_owned())];
    all.extend(variants(s));
    let vector = all
        .iter()
        .find(|(l, _)| l == "vector-loads")
        .map(|(_, t)| probed(t));
    if let Some(p) = &vector {
        assert!(p.contains("r3_probe("), "{p}");
        all.push(("vector-loads, probed".into(), p.clone()));
    }
    let labels: Vec<&str> = all.iter().map(|(l, _)| l.as_str()).collect();
    for rule in must_apply {
        assert!(
            labels.contains(rule),
            "{rule} did not apply to {}: {labels:?}",
            s.name
        );
    }
    let mut code = PROBE.to_owned();
    let mut main = format!(
        "  auto run = [&](auto kernel, const char *variant) {{\n{}\n  }};\n",
        s.driver
    );
    let mut defines: Vec<(String, String)> = Vec::new();
    for (n, (label, text)) in all.iter().enumerate() {
        code += &format!("namespace r3_variant{n} {{\n{text}\n}}\n");
        main += &format!("  run(&r3_variant{n}::{}, \"{label}\");\n", s.name);
        for d in knob_defines(text) {
            if !defines.contains(&d) {
                defines.push(d);
            }
        }
    }
    main += "  std::printf(\"taken %ld skipped %ld\\n\", r3_taken, r3_skipped);\n";
    let defines: Vec<(&str, &str)> = defines
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    let stdout = run_on_cpu(&code, &main, &defines);
    let printed = dumped(&stdout);
    for l in &labels {
        assert!(printed.keys().any(|(v, _)| v == l), "{l} printed nothing");
    }
    assert_same(&stdout, "original", Compare::Exact);
    if vector.is_some() {
        let counts = probe_counts(&stdout);
        assert!(counts[0] > 0, "{}: no thread took the vector path", s.name);
        assert!(counts[1] > 0, "{}: no thread fell back", s.name);
    }
}

#[test]
fn the_harness_runs_blocks_with_shared_memory_barriers_and_early_returns() {
    // gemm_tiled against a plain product on the host, in the same order: exact.
    let main = r#"
  for (int n : {37, 64}) {
    auto A = r3cpu::random_floats(n * n, 1);
    auto B = r3cpu::random_floats(n * n, 2);
    std::vector<float> C(n * n), R(n * n);
    r3cpu::launch(gemm_tiled, dim3((n + 15) / 16, (n + 15) / 16), dim3(16, 16), n, A.data(), B.data(), C.data());
    for (int i = 0; i < n; i++)
      for (int j = 0; j < n; j++) {
        float acc = 0.0f;
        for (int k = 0; k < n; k++) acc += A[i * n + k] * B[k * n + j];
        R[i * n + j] = acc;
      }
    char what[16];
    std::snprintf(what, sizeof what, "n=%d", n);
    r3cpu::dump("kernel", what, C.data(), C.size());
    r3cpu::dump("host", what, R.data(), R.size());
  }
  int hits = 0;
  r3cpu::launch(count_blocks, dim3(3, 2), dim3(4, 2, 2), &hits);
  std::printf("hits %d\n", hits);
  std::printf("align %zu %zu %zu\n", alignof(float2), alignof(float4), alignof(int4));
"#;
    let code = format!(
        "{}\n__global__ void count_blocks(int *hits) {{\n  __shared__ int seen;\n  if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) seen = 0;\n  __syncthreads();\n  if (threadIdx.z == 1) return;\n  atomicAdd(&seen, 1);\n  __syncthreads();\n  if (threadIdx.x == 3 && threadIdx.y == 1 && seen == 8) atomicAdd(hits, 1);\n}}",
        GEMM_TILED.source
    );
    let out = run_on_cpu(&code, main, &[]);
    assert_same(&out, "host", Compare::Exact);
    assert!(
        out.contains("hits 6\n"),
        "every block saw its 8 threads: {out}"
    );
    assert!(out.contains("align 8 16 16\n"), "{out}");
}

#[test]
fn outputs_compare_exactly_or_within_a_relative_tolerance() {
    let one = 1.0f32.to_bits();
    let next = one + 1;
    let out = format!("a|x: {one:08x} 00000005\nb|x: {next:08x} 00000005\n");
    assert_same(&out, "a", Compare::Relative(1e-6));
    let exact = std::panic::catch_unwind(|| assert_same(&out, "a", Compare::Exact));
    assert!(exact.is_err(), "one ulp apart is not the same bits");
    let ten_ulps = format!("a|x: {one:08x}\nb|x: {:08x}\n", one + 10);
    let loose = std::panic::catch_unwind(|| assert_same(&ten_ulps, "a", Compare::Relative(1e-7)));
    assert!(loose.is_err(), "ten ulps (1.2e-6) is more than 1e-7");
}

#[test]
fn knob_declarations_are_taken_out_and_their_values_defined() {
    let code = "R3_PARAM(R3_TK, 8, 16)\n  R3_REQUIRE(R3_TK <= BLOCK_X &&\n    R3_TK > 0)\n__global__ void k(int *out) { out[0] = R3_TK * __LINE__; }\n";
    let out = run_on_cpu(
        code,
        "int x = 0; r3cpu::launch(k, dim3(1), dim3(1), &x); std::printf(\"%d\\n\", x);",
        &[("R3_TK", "16")],
    );
    assert_eq!(out, "64\n", "R3_TK = 16 on line 4 of the code");
}

#[test]
fn rules_keep_mv_bit_identical() {
    let all = [
        "restrict",
        "register-accumulator",
        "unroll-4",
        "vector-loads",
    ];
    rule_variants_match_the_original(&MV, &all);
}

#[test]
fn rules_keep_gemm_naive_bit_identical() {
    rule_variants_match_the_original(&GEMM_NAIVE, &["restrict", "unroll-4", "vector-loads"]);
}

/// Vector loads here only under the disjoint-pointers fact: the loop stores through C.
#[test]
fn rules_keep_syrk_bit_identical() {
    let all = [
        "restrict",
        "register-accumulator",
        "unroll-4",
        "vector-loads",
    ];
    rule_variants_match_the_original(&SYRK, &all);
}

#[test]
fn rules_keep_gemm_tiled_bit_identical() {
    rule_variants_match_the_original(
        &GEMM_TILED,
        &["restrict", "unroll-constant", "block-grouping"],
    );
}

#[test]
fn rules_keep_pair_counts_bit_identical() {
    rule_variants_match_the_original(&PAIR_COUNTS, &["restrict", "register-accumulator"]);
}

#[test]
fn rules_keep_rowdot_bit_identical() {
    rule_variants_match_the_original(&ROWDOT, &["restrict", "unroll-4", "vector-loads"]);
}

/// The tiling template's every tile depth against the original, on the CPU: blocks of the
/// recorded shape take the tiled path where all their threads are active (counted through a
/// probe on the vote), the others (edges, the triangle's diagonal, other shapes) the original
/// code; outputs must match to the bit, since each sum keeps its order.
fn tiling_matches_the_original(s: &Subject, block: [u32; 3], builds: &[[&str; 3]]) {
    tiled_matches_the_original(s, block, builds, |t| t.to_owned(), Tiles::Taken);
}

/// Whether some block of the driver's must take the tiled path.
#[derive(PartialEq)]
enum Tiles {
    Taken,
    NeverTaken,
}

/// As `tiling_matches_the_original`, with the template edited by `edit` first.
fn tiled_matches_the_original(
    s: &Subject,
    block: [u32; 3],
    builds: &[[&str; 3]],
    edit: impl Fn(&str) -> String,
    tiles: Tiles,
) {
    let facts = Facts {
        pointers_disjoint: Some(true),
        block: Some(block),
    };
    let tiled = edit(
        &rules::rule("shared-tiling")
            .unwrap()
            .apply(s.source, &facts)
            .unwrap_or_else(|| panic!("shared-tiling does not apply to {}", s.name)),
    );
    let probed: String = tiled
        .lines()
        .map(|l| match l.find("__syncthreads_and(") {
            Some(at) => {
                let head = l[..at].to_owned() + "r3_probe(" + &l[at..];
                format!("{})) {{\n", head.strip_suffix(") {").unwrap())
            }
            None => format!("{l}\n"),
        })
        .collect();
    assert!(probed.contains("r3_probe(__syncthreads_and("), "{probed}");
    let code = format!(
        "{PROBE}namespace r3_variant0 {{\n{}\n}}\nnamespace r3_variant1 {{\n{probed}\n}}\n",
        s.source
    );
    let main = format!(
        "  auto run = [&](auto kernel, const char *variant) {{\n{}\n  }};\n  run(&r3_variant0::{n}, \"original\");\n  run(&r3_variant1::{n}, \"tiled\");\n  std::printf(\"taken %ld skipped %ld\\n\", r3_taken, r3_skipped);\n",
        s.driver,
        n = s.name
    );
    // Each axis grouped in some build has its knob.
    for (axis, knob) in [
        (1, "R3_PARAM(R3_RX, 1, 2, 4)"),
        (2, "R3_PARAM(R3_RY, 1, 2, 4)"),
    ] {
        let grouped = builds.iter().any(|b| b[axis] != "1");
        assert!(!grouped || tiled.contains(knob), "{tiled}");
    }
    // How many loads go out together (R3_LU, where the template has the knob) changes no
    // result; both values are compiled, by turns.
    for (i, [depth, rx, ry]) in builds.iter().enumerate() {
        let loads = ["4", "32"][i % 2];
        let stdout = run_on_cpu(
            &code,
            &main,
            &[
                ("R3_TK", depth),
                ("R3_RX", rx),
                ("R3_RY", ry),
                ("R3_LU", loads),
            ],
        );
        let depth = format!("{depth} R3_RX={rx} R3_RY={ry} R3_LU={loads}");
        assert_same(&stdout, "original", Compare::Exact);
        let counts = probe_counts(&stdout);
        assert_eq!(
            counts[0] > 0,
            tiles == Tiles::Taken,
            "{} R3_TK={depth}: blocks that took the tiles: {}",
            s.name,
            counts[0]
        );
        assert!(
            counts[1] > 0,
            "{} R3_TK={depth}: no block fell back",
            s.name
        );
    }
}

/// Every tile depth ungrouped, and groups of blocks of each shape.
const GEMM_BUILDS: &[[&str; 3]] = &[
    ["8", "1", "1"],
    ["16", "1", "1"],
    ["32", "1", "1"],
    ["64", "1", "1"],
    ["16", "2", "2"],
    ["8", "4", "1"],
    ["16", "1", "4"],
    ["32", "4", "4"],
    ["64", "2", "4"],
];

#[test]
fn shared_tiling_keeps_gemm_naive_bit_identical_at_every_tile_depth_and_grouping() {
    tiling_matches_the_original(&GEMM_NAIVE, [16, 16, 1], GEMM_BUILDS);
}

/// The comparison finds a grouped template whose threads read the first block's tile lane
/// for every block of the group.
#[test]
fn a_wrong_tile_lane_under_grouping_is_found() {
    let wrong = |t: &str| {
        assert!(
            t.contains("r3_tile1[r3_d][threadIdx.x + r3_rx * 16]"),
            "{t}"
        );
        t.replace(
            "r3_tile1[r3_d][threadIdx.x + r3_rx * 16]",
            "r3_tile1[r3_d][threadIdx.x]",
        )
    };
    let caught = std::panic::catch_unwind(|| {
        tiled_matches_the_original(
            &GEMM_NAIVE,
            [16, 16, 1],
            &[["16", "2", "1"]],
            wrong,
            Tiles::Taken,
        )
    });
    let message = caught.expect_err("the wrong lane went unnoticed");
    let text = message
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(text.contains("differs from original"), "{text}");
}

/// A flat thread index with derived row and column: tiles only (no grouping knobs), at every
/// tile depth that fits.
#[test]
fn shared_tiling_keeps_a_flat_indexed_dense_layer_bit_identical_at_every_tile_depth() {
    let facts = Facts {
        pointers_disjoint: Some(true),
        block: Some([256, 1, 1]),
    };
    let tiled = rules::rule("shared-tiling")
        .unwrap()
        .apply(DENSE.source, &facts)
        .unwrap();
    assert!(
        !tiled.contains("R3_RX") && !tiled.contains("R3_RY"),
        "{tiled}"
    );
    tiling_matches_the_original(&DENSE, [256, 1, 1], &[["8", "1", "1"], ["16", "1", "1"]]);
}

/// A row walk through a row pointer: read through its base, tiled at every depth, and grouped.
#[test]
fn shared_tiling_keeps_a_row_walk_through_a_row_pointer_bit_identical() {
    let builds = [
        ["8", "1", "1"],
        ["16", "2", "1"],
        ["32", "4", "1"],
        ["64", "1", "1"],
    ];
    tiling_matches_the_original(&ROWPTR, [32, 1, 1], &builds);
}

#[test]
fn rules_keep_a_row_walk_through_a_row_pointer_bit_identical() {
    rule_variants_match_the_original(&ROWPTR, &["restrict", "unroll-4"]);
}

/// Derived row and column again, one operand tiled along `k` and one along the threads.
#[test]
fn shared_tiling_keeps_a_flat_indexed_contraction_bit_identical_at_every_tile_depth() {
    // 64 steps of two 128-wide tiles pass 48 KiB: that build is not made.
    let builds = [["8", "1", "1"], ["16", "1", "1"], ["32", "1", "1"]];
    tiling_matches_the_original(&CONTRACT, [128, 1, 1], &builds);
}

#[test]
fn rules_keep_dense_bit_identical() {
    rule_variants_match_the_original(&DENSE, &["restrict", "register-accumulator"]);
}

#[test]
fn shared_tiling_keeps_64_bit_coordinates_bit_identical_at_every_tile_depth_and_grouping() {
    tiling_matches_the_original(&GEMM_WIDE, [16, 16, 1], GEMM_BUILDS);
}

#[test]
fn shared_tiling_keeps_a_constant_extent_gemm_bit_identical_at_every_tile_depth_and_grouping() {
    tiling_matches_the_original(&GEMM_TEXTBOOK, [16, 16, 1], GEMM_BUILDS);
    // The constant is not the recorded extent: blocks of the recorded shape leave holes and
    // overlaps in C, and must run the original code.
    let other = Subject {
        source: Box::leak(
            GEMM_TEXTBOOK
                .source
                .replace("#define TILE 16", "#define TILE 32")
                .into_boxed_str(),
        ),
        ..GEMM_TEXTBOOK
    };
    tiled_matches_the_original(
        &other,
        [16, 16, 1],
        &[["16", "1", "1"], ["16", "2", "2"]],
        |t| t.to_owned(),
        Tiles::NeverTaken,
    );
}

#[test]
fn shared_tiling_keeps_syrk_bit_identical_at_every_tile_depth_and_grouping() {
    // Groups four blocks wide never lie wholly below the diagonal in these cases.
    let builds: Vec<[&str; 3]> = GEMM_BUILDS
        .iter()
        .copied()
        .filter(|b| b[1] != "4")
        .collect();
    tiling_matches_the_original(&SYRK, [32, 8, 1], &builds);
}

/// out = in^T as corpus/transpose_naive.cu computes it: the column write the staged-store rule
/// reorders.
const TRANSPOSE: Subject = Subject {
    name: "transpose_naive_kernel",
    source: r#"__global__ void transpose_naive_kernel(int rows, int cols, const float* __restrict__ in,
                                       float* __restrict__ out) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  int r = blockIdx.y * blockDim.y + threadIdx.y;
  if (r < rows && c < cols) out[static_cast<size_t>(c) * rows + r] = in[static_cast<size_t>(r) * cols + c];
}"#,
    driver: r#"
  struct Case { int rows, cols, bx, by; };
  for (Case c : {Case{37, 45, 32, 8}, Case{64, 64, 32, 8}, Case{8, 32, 32, 8}, Case{45, 37, 16, 16},
                 Case{33, 70, 32, 8}, Case{20, 9, 4, 4}}) {
    auto in = r3cpu::random_floats(c.rows * c.cols, 81);
    std::vector<float> out(c.rows * c.cols + 3, -7.0f);
    dim3 grid((c.cols + c.bx - 1) / c.bx, (c.rows + c.by - 1) / c.by);
    r3cpu::launch(kernel, grid, dim3(c.bx, c.by), c.rows, c.cols, in.data(), out.data());
    char what[64];
    std::snprintf(what, sizeof what, "rows=%d cols=%d block=%dx%d out", c.rows, c.cols, c.bx, c.by);
    r3cpu::dump(variant, what, out.data(), out.size());
  }
"#,
};

/// A scaled transpose in doubles behind a guard that returns, its index in a local.
const TRANSPOSE_SCALED: Subject = Subject {
    name: "scaled_t",
    source: r#"__global__ void scaled_t(int n, int m, double alpha, const double *a, double *b) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  const int i = blockIdx.y * blockDim.y + threadIdx.y;
  if (i >= n || j >= m) return;
  size_t o = (size_t)j * n + i;
  b[o] = alpha * a[(size_t)i * m + j];
}"#,
    driver: r#"
  struct Case { int n, m, bx, by; };
  for (Case c : {Case{37, 45, 16, 16}, Case{32, 16, 16, 16}, Case{45, 37, 8, 4}, Case{17, 3, 16, 16},
                 Case{70, 9, 4, 32}}) {
    auto f = r3cpu::random_floats(c.n * c.m, 82);
    std::vector<double> a(f.begin(), f.end()), b(c.n * c.m + 2, -7.0);
    dim3 grid((c.m + c.bx - 1) / c.bx, (c.n + c.by - 1) / c.by);
    r3cpu::launch(kernel, grid, dim3(c.bx, c.by), c.n, c.m, 1.5, a.data(), b.data());
    std::vector<float> low(b.begin(), b.end());
    char what[64];
    std::snprintf(what, sizeof what, "n=%d m=%d block=%dx%d b", c.n, c.m, c.bx, c.by);
    r3cpu::dump(variant, what, low.data(), low.size());
  }
"#,
};

/// out = in^T written the other way round: the store contiguous, the load a column.
const TRANSPOSE_GATHER: Subject = Subject {
    name: "gather_t",
    source: r#"__global__ void gather_t(int h, int w, const float *a, float *b) {
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= w || y >= h) return;
  float v = a[(size_t)x * h + y];
  b[(size_t)y * w + x] = v * 0.5f + a[(size_t)x * h + (y + 1) % h];
}"#,
    driver: r#"
  struct Case { int h, w, bx, by; };
  for (Case c : {Case{37, 45, 32, 8}, Case{64, 64, 32, 8}, Case{8, 32, 32, 8}, Case{45, 37, 16, 16},
                 Case{70, 33, 32, 8}}) {
    auto a = r3cpu::random_floats(c.h * c.w, 83);
    std::vector<float> b(c.h * c.w + 3, -7.0f);
    dim3 grid((c.w + c.bx - 1) / c.bx, (c.h + c.by - 1) / c.by);
    r3cpu::launch(kernel, grid, dim3(c.bx, c.by), c.h, c.w, a.data(), b.data());
    char what[64];
    std::snprintf(what, sizeof what, "h=%d w=%d block=%dx%d b", c.h, c.w, c.bx, c.by);
    r3cpu::dump(variant, what, b.data(), b.size());
  }
"#,
};

/// The staged-store rule against the original, on the CPU: blocks of the recorded shape take
/// the staged path (counted through a probe on its shape test), the others the original code;
/// every element must come out the same, and none that the original leaves alone be written,
/// at each of the `grouped` values of the knob that groups blocks.
fn staged_matches_the_original(s: &Subject, block: [u32; 3], grouped: usize) {
    let facts = Facts {
        pointers_disjoint: None,
        block: Some(block),
    };
    let staged = rules::rule("staged-store")
        .unwrap()
        .apply(s.source, &facts)
        .unwrap_or_else(|| panic!("staged-store does not apply to {}", s.name));
    let shape = format!(
        "if (blockDim.x == {} && blockDim.y == {} && blockDim.z == 1) {{",
        block[0], block[1]
    );
    let probed = staged.replacen(
        &shape,
        &format!("if (r3_probe({})) {{", &shape[4..shape.len() - 3]),
        1,
    );
    assert!(probed.contains("if (r3_probe(blockDim.x =="), "{probed}");
    let code = format!(
        "{PROBE}namespace r3_variant0 {{\n{}\n}}\nnamespace r3_variant1 {{\n{probed}\n}}\n",
        s.source
    );
    let main = format!(
        "  auto run = [&](auto kernel, const char *variant) {{\n{}\n  }};\n  run(&r3_variant0::{n}, \"original\");\n  run(&r3_variant1::{n}, \"staged\");\n  std::printf(\"taken %ld skipped %ld\\n\", r3_taken, r3_skipped);\n",
        s.driver,
        n = s.name
    );
    // Each group the knob offers (1: every block writes its own), partial groups at the grid's
    // edge among them.
    let groups: Vec<String> = staged
        .lines()
        .find_map(|l| l.strip_prefix("R3_PARAM(R3_SG, "))
        .map(|v| {
            v.trim_end_matches(')')
                .split(", ")
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_else(|| vec!["1".to_owned()]);
    assert_eq!(groups.len(), grouped, "{staged}");
    for group in &groups {
        let stdout = run_on_cpu(&code, &main, &[("R3_SG", group)]);
        assert_same(&stdout, "original", Compare::Exact);
        let counts = probe_counts(&stdout);
        assert!(
            counts[0] > 0,
            "{} R3_SG={group}: no block took the staged path",
            s.name
        );
        assert!(
            counts[1] > 0,
            "{} R3_SG={group}: no block fell back",
            s.name
        );
    }
}

#[test]
fn staged_store_keeps_a_naive_transpose_bit_identical_on_edges_and_other_shapes() {
    staged_matches_the_original(&TRANSPOSE, [32, 8, 1], 2);
}

#[test]
fn staged_store_keeps_a_guarded_scaled_transpose_bit_identical() {
    staged_matches_the_original(&TRANSPOSE_SCALED, [16, 16, 1], 2);
    // Blocks a whole column high: nothing to group.
    staged_matches_the_original(&TRANSPOSE_SCALED, [4, 32, 1], 1);
}

#[test]
fn staged_store_keeps_a_gathering_transpose_bit_identical() {
    let facts = Facts {
        pointers_disjoint: None,
        block: Some([32, 8, 1]),
    };
    let staged = rules::rule("staged-store")
        .unwrap()
        .apply(TRANSPOSE_GATHER.source, &facts)
        .unwrap();
    assert!(
        staged.contains("const uint3 threadIdx = {r3_col, r3_row % 8, 0};"),
        "the load side: {staged}"
    );
    staged_matches_the_original(&TRANSPOSE_GATHER, [32, 8, 1], 2);
}

/// The comparison finds a staged path whose threads write each other's values.
#[test]
fn a_staged_store_writing_the_wrong_slot_is_found() {
    let wrong = Subject {
        source: Box::leak(
            rules::rule("staged-store")
                .unwrap()
                .apply(
                    TRANSPOSE.source,
                    &Facts {
                        pointers_disjoint: None,
                        block: Some([32, 8, 1]),
                    },
                )
                .unwrap()
                .replace(
                    "*r3_to = r3_st_value[r3_col][r3_row]",
                    "*r3_to = r3_st_value[r3_col][(r3_row + 1) % (8 * R3_SG)]",
                )
                .into_boxed_str(),
        ),
        ..TRANSPOSE
    };
    assert!(
        wrong.source.contains("(r3_row + 1) % (8 * R3_SG)"),
        "{}",
        wrong.source
    );
    let code = format!(
        "{PROBE}namespace r3_variant0 {{\n{}\n}}\nnamespace r3_variant1 {{\n{}\n}}\n",
        TRANSPOSE.source, wrong.source
    );
    let main = format!(
        "  auto run = [&](auto kernel, const char *variant) {{\n{}\n  }};\n  run(&r3_variant0::{n}, \"original\");\n  run(&r3_variant1::{n}, \"wrong\");\n",
        TRANSPOSE.driver,
        n = TRANSPOSE.name
    );
    let stdout = run_on_cpu(&code, &main, &[("R3_SG", "4")]);
    let message = std::panic::catch_unwind(|| assert_same(&stdout, "original", Compare::Exact))
        .expect_err("a wrong slot must differ");
    let text = message
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(text.contains("differs from original"), "{text}");
}

/// The corpus's tiled product as it is written: 32 x 32 tiles, blocks of 32 x 8, each thread
/// four rows of its tile in an array, loads in a row loop, `#pragma unroll` on the inner loops.
const GEMM_TILED_ROWS: Subject = Subject {
    name: "gemm_tiled_rows",
    source: r#"__global__ void gemm_tiled_rows(int n, const float* __restrict__ A, const float* __restrict__ B,
                                float* __restrict__ C) {
  __shared__ float As[32][32];
  __shared__ float Bs[32][32];
  int tx = threadIdx.x, ty = threadIdx.y;
  int col = blockIdx.x * 32 + tx;
  int row0 = blockIdx.y * 32;
  float acc[32 / 8] = {};
  for (int t = 0; t < n; t += 32) {
    for (int r = ty; r < 32; r += 8) {
      As[r][tx] = A[static_cast<size_t>(row0 + r) * n + t + tx];
      Bs[r][tx] = B[static_cast<size_t>(t + r) * n + col];
    }
    __syncthreads();
#pragma unroll 8
    for (int k = 0; k < 32; ++k) {
      float b = Bs[k][tx];
#pragma unroll
      for (int j = 0; j < 32 / 8; ++j) acc[j] += As[ty + j * 8][k] * b;
    }
    __syncthreads();
  }
#pragma unroll
  for (int j = 0; j < 32 / 8; ++j)
    C[static_cast<size_t>(row0 + ty + j * 8) * n + col] = acc[j];
}"#,
    driver: r#"
  for (int n : {32, 96, 128}) {
    auto A = r3cpu::random_floats(n * n, 61);
    auto B = r3cpu::random_floats(n * n, 62);
    std::vector<float> C(n * n, -7.0f);
    r3cpu::launch(kernel, dim3(n / 32, n / 32), dim3(32, 8), n, A.data(), B.data(), C.data());
    char what[64];
    std::snprintf(what, sizeof what, "n=%d C", n);
    r3cpu::dump(variant, what, C.data(), C.size());
  }
"#,
};

/// Every grouping but none: along x, along y, and both.
const GROUPINGS: &[[&str; 2]] = &[
    ["2", "1"],
    ["4", "1"],
    ["1", "2"],
    ["1", "4"],
    ["2", "2"],
    ["4", "2"],
    ["2", "4"],
    ["4", "4"],
];

/// The block-grouping rule's every grouping against the original, on the CPU: the first block
/// of each whole group takes the grouped path (counted through a probe on its condition), the
/// blocks of incomplete groups the original code; outputs must match to the bit, as each
/// output keeps its operations and their order.
fn grouped_matches_the_original(s: &Subject, builds: &[[&str; 2]], edit: impl Fn(&str) -> String) {
    let grouped = edit(
        &rules::rule("block-grouping")
            .unwrap()
            .apply(s.source, &Facts::default())
            .unwrap_or_else(|| panic!("block-grouping does not apply to {}", s.name)),
    );
    let is_head =
        |l: &str| l.trim_start().starts_with("if (blockIdx.") && l.contains("<= gridDim.");
    assert!(grouped.lines().any(is_head), "{grouped}");
    let probed: String = grouped
        .lines()
        .map(|l| match l.trim_start().strip_prefix("if (") {
            Some(cond) if is_head(l) => {
                format!("if (r3_probe({})) {{\n", cond.strip_suffix(") {").unwrap())
            }
            _ => format!("{l}\n"),
        })
        .collect();
    let code = format!(
        "{PROBE}namespace r3_variant0 {{\n{}\n}}\nnamespace r3_variant1 {{\n{probed}\n}}\n",
        s.source
    );
    let main = format!(
        "  auto run = [&](auto kernel, const char *variant) {{\n{}\n  }};\n  run(&r3_variant0::{n}, \"original\");\n  run(&r3_variant1::{n}, \"grouped\");\n  std::printf(\"taken %ld skipped %ld\\n\", r3_taken, r3_skipped);\n",
        s.driver,
        n = s.name
    );
    for [gx, gy] in builds {
        let stdout = run_on_cpu(&code, &main, &[("R3_GX", gx), ("R3_GY", gy)]);
        assert_same(&stdout, "original", Compare::Exact);
        let counts = probe_counts(&stdout);
        assert!(counts[0] > 0, "{} R3_GX={gx} R3_GY={gy}: no group", s.name);
        assert!(
            counts[1] > 0,
            "{} R3_GX={gx} R3_GY={gy}: no block of an incomplete group",
            s.name
        );
    }
}

#[test]
fn block_grouping_keeps_a_guarded_tiled_product_bit_identical_at_every_grouping() {
    grouped_matches_the_original(&GEMM_TILED, GROUPINGS, |t| t.to_owned());
}

#[test]
fn block_grouping_keeps_the_corpus_tiled_product_bit_identical_at_every_grouping() {
    grouped_matches_the_original(&GEMM_TILED_ROWS, GROUPINGS, |t| t.to_owned());
}

#[test]
fn rules_keep_the_corpus_tiled_product_bit_identical() {
    rule_variants_match_the_original(&GEMM_TILED_ROWS, &["block-grouping"]);
}

#[test]
fn a_grouped_block_reading_the_wrong_copy_is_found() {
    let wrong = |t: &str| {
        let right = "Bs[r3_gx][k][tx]";
        assert!(t.contains(right), "{t}");
        t.replace(right, "Bs[0][k][tx]")
    };
    let caught = std::panic::catch_unwind(|| {
        grouped_matches_the_original(&GEMM_TILED_ROWS, &[["2", "1"]], wrong)
    });
    let message = caught.expect_err("the wrong copy went unnoticed");
    let text = message
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(text.contains("differs from original"), "{text}");
}

/// A tiled product in the textbook style: block coordinates copied to locals, the tile loop
/// walking two running offsets at once, its bound set by the row alone, the shared tiles
/// declared inside the loop. Only blocks along x share a tile (the rows of A), so the rule may
/// group along x only, and the loop stays one loop with its column offset repeated per block.
const TILE_WALK: Subject = Subject {
    name: "tile_walk",
    source: r#"__global__ void tile_walk(float *C, const float *A, const float *B, int wa, int wb) {
  int bx = blockIdx.x;
  int by = blockIdx.y;
  int tx = threadIdx.x, ty = threadIdx.y;
  int first_a = wa * 16 * by;
  int last_a = first_a + wa - 1;
  int first_b = 16 * bx;
  float sum = 0.0f;
  for (int a = first_a, b = first_b; a <= last_a; a += 16, b += 16 * wb) {
    __shared__ float At[16][16];
    __shared__ float Bt[16][16];
    At[ty][tx] = A[a + wa * ty + tx];
    Bt[ty][tx] = B[b + wb * ty + tx];
    __syncthreads();
#pragma unroll
    for (int k = 0; k < 16; ++k) sum += At[ty][k] * Bt[k][tx];
    __syncthreads();
  }
  int c = wb * 16 * by + 16 * bx;
  C[c + wb * ty + tx] = sum;
}"#,
    driver: r#"
  for (int n : {32, 80, 128}) {
    auto A = r3cpu::random_floats(n * n, 71);
    auto B = r3cpu::random_floats(n * n, 72);
    std::vector<float> C(n * n, -7.0f);
    r3cpu::launch(kernel, dim3(n / 16, n / 16), dim3(16, 16), C.data(), A.data(), B.data(), n, n);
    char what[64];
    std::snprintf(what, sizeof what, "n=%d C", n);
    r3cpu::dump(variant, what, C.data(), C.size());
  }
"#,
};

#[test]
fn block_grouping_keeps_a_two_offset_tile_walk_bit_identical_grouped_along_x() {
    let grouped = rules::rule("block-grouping")
        .unwrap()
        .apply(TILE_WALK.source, &Facts::default())
        .expect("block-grouping applies to the tile walk");
    assert!(!grouped.contains("R3_GY"), "{grouped}");
    grouped_matches_the_original(&TILE_WALK, &[["2", "1"], ["4", "1"]], |t| t.to_owned());
}

#[test]
fn block_grouping_keeps_a_break_on_the_column_bit_identical_grouped_along_y() {
    let source = GEMM_TILED.source.replace(
        "acc += As[ty][k] * Bs[k][tx];",
        "{ if (col % 5 == 1 && k > 9) break; acc += As[ty][k] * Bs[k][tx]; }",
    );
    let subject = Subject {
        source: Box::leak(source.into_boxed_str()),
        ..GEMM_TILED
    };
    let grouped = rules::rule("block-grouping")
        .unwrap()
        .apply(subject.source, &Facts::default())
        .expect("block-grouping applies along y");
    assert!(!grouped.contains("R3_GX"), "{grouped}");
    grouped_matches_the_original(&subject, &[["1", "2"], ["1", "4"]], |t| t.to_owned());
}
