//! What a comparison writes: the markdown `--out` (its hand-written notes
//! kept, and the sweep's and the TLS comparison's own sections spliced in
//! place) and the headline printed at the end.

use std::path::Path;

use anyhow::Context;

use super::table::{self, Report};
use super::{sweep_table, tls_table, CompareArgs};

/// Writes the markdown to `--out`, keeping its hand-written notes. A report
/// of the sweep or the TLS comparison alone replaces just their sections.
pub fn write_report(args: &CompareArgs, report: &Report) -> anyhow::Result<()> {
    if args.out == Path::new("-") {
        return Ok(());
    }
    let existing = std::fs::read_to_string(&args.out).unwrap_or_default();
    let (date, command, machine) = (&report.date, &report.command, &report.machine);
    let own_sections = |doc: &str| {
        let mut doc = doc.to_string();
        if let Some(s) = &report.sweep {
            doc = sweep_table::splice(&doc, &sweep_table::section(s, date, command, machine));
        }
        if let Some(t) = &report.tls {
            let section = tls_table::section(t, date, command, machine);
            doc = sweep_table::splice_between(
                &doc,
                tls_table::TLS_BEGIN,
                tls_table::TLS_END,
                &section,
            );
        }
        doc
    };
    let doc = if report.has_main_sections() {
        table::render(report, &own_sections(table::kept_notes(&existing)))
    } else {
        own_sections(&existing)
    };
    if let Some(dir) = args.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&args.out, doc).with_context(|| format!("writing {}", args.out.display()))?;
    eprintln!("ferrobench compare: wrote {}", args.out.display());
    Ok(())
}

pub fn print_headline(report: &Report) {
    println!(
        "\nferrocache vs memcached ({}; {}, {} cores)\n{}\n",
        report.date, report.machine.cpu_model, report.machine.cores, report.command
    );
    print!("{}", table::headline(report));
    for g in table::gaps(report) {
        println!("- {g}");
    }
    if let Some(s) = &report.sweep {
        println!("\nConnection sweep, {} (medians)\n", s.workload);
        print!(
            "{}\n{}",
            sweep_table::tables(s),
            sweep_table::target_lines(s)
        );
        let contended = sweep_table::contended(s);
        for w in s.skipped.iter().chain(&s.warnings).chain(&contended) {
            println!("warning: {w}");
        }
    }
    if let Some(t) = &report.tls {
        println!("\nTLS, {} (medians)\n", t.preset);
        print!("{}\n{}", tls_table::table(t), tls_table::target_lines(t));
        for w in t.warnings.iter().chain(&tls_table::contended(t)) {
            println!("warning: {w}");
        }
    }
    for w in &report.warnings {
        println!("warning: {w}");
    }
    println!("({:.0} s)", report.elapsed_secs);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::sweep;
    use clap::Parser;

    #[test]
    fn a_sweep_only_report_rewrites_only_its_section() {
        let dir = std::env::temp_dir().join(format!("compare-sweep-doc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("benchmarks.md");
        let doc = format!(
            "# Benchmarks\n\nfigures\n\n{}\n## Mine\n\n## Notes\n\nhow\n",
            table::NOTES_MARKER
        );
        std::fs::write(&out, &doc).unwrap();
        let args = CompareArgs::parse_from(["compare", "--out", out.to_str().unwrap()]);
        let report = Report {
            date: "2026-11-27".into(),
            sweep: Some(sweep::SweepRuns {
                workload: "legup-p16".into(),
                ..sweep::SweepRuns::default()
            }),
            ..Report::default()
        };
        write_report(&args, &report).unwrap();
        let first = std::fs::read_to_string(&out).unwrap();
        assert!(
            first.starts_with(&doc[..doc.find("## Notes").unwrap()]),
            "{first}"
        );
        assert!(
            first.ends_with("<!-- connection sweep: end -->\n\n## Notes\n\nhow\n"),
            "{first}"
        );
        write_report(&args, &report).unwrap();
        assert_eq!(
            std::fs::read_to_string(&out).unwrap(),
            first,
            "a rerun replaces it in place"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_full_report_keeps_the_tls_section_among_the_notes() {
        let dir = std::env::temp_dir().join(format!("compare-tls-doc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("benchmarks.md");
        let args = CompareArgs::parse_from(["compare", "--out", out.to_str().unwrap()]);
        let tls_only = Report {
            date: "2026-11-27 00:10 UTC".into(),
            tls: Some(crate::compare::tls::TlsRuns {
                preset: "solarflare-get".into(),
                ..Default::default()
            }),
            ..Report::default()
        };
        std::fs::write(
            &out,
            format!("# B\n\n{}\n## Notes\n\nhow\n", table::NOTES_MARKER),
        )
        .unwrap();
        write_report(&args, &tls_only).unwrap();
        let first = std::fs::read_to_string(&out).unwrap();
        assert!(first.contains("## TLS: CPU per get against memcached -Z (2026-11-27)"));
        assert!(
            first.ends_with("<!-- TLS: end -->\n\n## Notes\n\nhow\n"),
            "{first}"
        );
        // A full run regenerates the top and keeps the section where it was.
        let full = Report {
            presets: vec![table::PresetRuns {
                preset: "solarflare-get".into(),
                runs: Vec::new(),
            }],
            ..Report::default()
        };
        write_report(&args, &full).unwrap();
        let second = std::fs::read_to_string(&out).unwrap();
        assert!(second.starts_with("# Benchmarks: ferrocache against memcached"));
        let tail = |d: &str| d[d.find(table::NOTES_MARKER).unwrap()..].to_string();
        assert_eq!(tail(&second), tail(&first));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
