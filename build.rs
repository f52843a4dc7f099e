//! With the `tch` feature: an rpath to the libtorch torch-sys linked against, so that this
//! package's tch binaries (tests, examples) run without LD_LIBRARY_PATH; and the same directory
//! passed on to crates that depend on this one, as DEP_BLOAD_LIBTORCH_LIB, for their own rpath.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var_os("CARGO_FEATURE_TCH").is_none() {
        return;
    }
    if let Some(dir) = std::env::var_os("DEP_TCH_LIBTORCH_LIB") {
        let dir = dir.to_string_lossy();
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
        println!("cargo:libtorch_lib={dir}");
    }
}
