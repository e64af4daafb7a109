//! A report on the terminal or for machines, and the exit code: what every subcommand of
//! `ethbcast-suite` and `ethbcast-bench` ends with.

use std::fmt::Display;
use std::process::ExitCode;

use serde::Serialize;

/// Prints `v` as pretty JSON.
pub fn print_json<T: Serialize>(v: &T) {
    println!("{}", serde_json::to_string_pretty(v).expect("serialisable"));
}

/// Prints the report `r`: JSON with `json`, else `text(r)`.
pub fn print<T: Serialize>(json: bool, r: &T, text: impl FnOnce(&T) -> String) {
    if json {
        print_json(r);
    } else {
        print!("{}", text(r));
    }
}

/// Says `error: {e}` and fails.
pub fn fail(e: impl Display) -> ExitCode {
    eprintln!("error: {e}");
    ExitCode::FAILURE
}

/// Success if `ok`, else failure.
pub fn code(ok: bool) -> ExitCode {
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
