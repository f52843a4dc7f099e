fn main() {
    // Generates the C++ side of the two bridges (types.rs.h, lib.rs.h and their .cc) and
    // compiles the .cc into this static library; CMake takes the headers from target/cxxbridge.
    cxx_build::bridges(["src/types.rs", "src/lib.rs"])
        .std("c++17")
        .compile("bload-cxx-bridge");
    println!("cargo:rerun-if-changed=src/lib.rs");
    println!("cargo:rerun-if-changed=src/types.rs");
}
