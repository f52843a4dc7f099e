//! One version, written in one place: Cargo.toml's `[package] version`, which `bload --version`
//! prints (tests/cli_help.rs). The other faces read it from there instead of keeping their own:
//! CMakeLists.txt for the CMake package and `bload::version()`, pyproject.toml for the Python
//! distribution, and `bload.__version__` asks the loaded library (tests/python/test_version.py
//! checks what they read once built). These checks keep a second copy from creeping back, and
//! the changelog's newest release on the version (docs/versioning.md).

use std::path::Path;

const VERSION: &str = env!("CARGO_PKG_VERSION");

fn read(path: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
}

/// The lines of `text` that start with `prefix`.
fn lines_starting<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
    text.lines()
        .filter(|line| line.starts_with(prefix))
        .collect()
}

#[test]
fn cargo_toml_has_the_one_version_line_the_others_read() {
    // CMakeLists.txt and pyproject.toml take the first line that starts `version = "`: it must
    // be the package's, and the only one.
    let cargo = read("Cargo.toml");
    assert_eq!(
        lines_starting(&cargo, "version = \""),
        [format!("version = \"{VERSION}\"")]
    );
    let package = cargo.find("[package]").unwrap();
    let line = cargo.find("\nversion = \"").unwrap();
    let next_table = cargo[package + 1..].find("\n[").unwrap() + package + 1;
    assert!(package < line && line < next_table, "not in [package]");
    let parts: Vec<&str> = VERSION.split('.').collect();
    assert_eq!(
        parts.len(),
        3,
        "{VERSION}: expected MAJOR.MINOR.PATCH, which CMake reads"
    );
    assert!(
        parts.iter().all(|part| part.parse::<u32>().is_ok()),
        "{VERSION}"
    );
}

#[test]
fn cmake_takes_the_version_from_cargo_toml() {
    let cmake = read("CMakeLists.txt");
    assert!(
        cmake.contains("file(STRINGS \"${CMAKE_CURRENT_SOURCE_DIR}/Cargo.toml\""),
        "CMakeLists.txt no longer reads Cargo.toml"
    );
    let project = lines_starting(&cmake, "project(bload");
    assert_eq!(
        project,
        ["project(bload VERSION ${bload_version} LANGUAGES CXX)"]
    );
    assert!(cmake.contains("BLOAD_VERSION=\"${PROJECT_VERSION}\""));
    assert!(
        !cmake.contains(VERSION),
        "a copy of {VERSION} in CMakeLists.txt"
    );
}

#[test]
fn the_python_distribution_and_package_take_the_version_from_cargo_toml() {
    let pyproject = read("pyproject.toml");
    // The version is dynamic (so are the dependencies: the torch series, docs/release.md).
    assert!(lines_starting(&pyproject, "dynamic = [\"version\"").len() == 1);
    assert!(
        lines_starting(&pyproject, "version").is_empty(),
        "{pyproject}"
    );
    assert!(pyproject.contains("metadata.version.input = \"Cargo.toml\""));
    let package = read("python/bload/__init__.py");
    assert!(lines_starting(&package, "__version__ = _version()").len() == 1);
    assert!(
        !package.contains(VERSION),
        "a copy of {VERSION} in the Python package"
    );
}

#[test]
fn the_newest_release_in_the_changelog_is_this_version() {
    let changelog = read("CHANGELOG.md");
    let newest = lines_starting(&changelog, "## [")[0];
    assert!(
        newest.starts_with(&format!("## [{VERSION}] - ")),
        "{newest}: expected the version of Cargo.toml, {VERSION}"
    );
}
