//! Prints each kernel of a store with its loop shape (`r3::ir::shape`): the key by which a
//! deadline prices a kernel by the searches of kernels like it (issue 55).
//!
//!   kernel_shapes STORE_DIR

fn main() {
    let Some(dir) = std::env::args().nth(1) else {
        eprintln!("usage: kernel_shapes STORE_DIR");
        std::process::exit(2);
    };
    let kernels = std::path::Path::new(&dir).join("kernels");
    let Ok(entries) = std::fs::read_dir(&kernels) else {
        eprintln!(
            "{}: no kernels/ here; fix: name a store `r3 kernels` lists",
            kernels.display()
        );
        std::process::exit(2);
    };
    let mut rows: Vec<(String, String)> = entries
        .flatten()
        .map(|e| {
            let shape = std::fs::read(e.path().join("module.bc"))
                .ok()
                .and_then(|bc| r3::ir::shape::of_bitcode(&bc))
                .unwrap_or_else(|| "(no module)".into());
            (e.file_name().to_string_lossy().into_owned(), shape)
        })
        .collect();
    rows.sort();
    for (hash, shape) in rows {
        println!("{hash}  {shape}");
    }
}
