//! Records which cargo features this build has, for the test that holds the table of
//! registry types (`src/registry.rs`) to the features that compile each one in.

fn main() {
    let mut features: Vec<String> = std::env::vars()
        .filter_map(|(k, _)| k.strip_prefix("CARGO_FEATURE_").map(str::to_string))
        // Cargo spells `-` as `_` here; the test compares both ways.
        .map(|f| f.to_ascii_lowercase())
        .collect();
    features.sort();
    println!(
        "cargo:rustc-env=MESHLINE_BUILD_FEATURES={}",
        features.join(",")
    );
}
