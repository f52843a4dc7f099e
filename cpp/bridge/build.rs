fn main() {
    // Generates the C++ side of the bridge (lib.rs.h, lib.rs.cc) and compiles the .cc into this
    // static library; CMake includes the header from target/cxxbridge.
    cxx_build::bridge("src/lib.rs")
        .std("c++17")
        .compile("bload-cxx-bridge");
    println!("cargo:rerun-if-changed=src/lib.rs");
}
