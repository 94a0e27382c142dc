//! A small `getopt_long` in glibc's manner: what memcached's command line goes through.
//!
//! ferrocache used clap until its messages had to be memcached's: an operator's scripts and
//! memcached's own test suite look at the exit status and the words a bad command line gets
//! (`memcached: invalid option -- 'q'`, then `Illegal argument "?"`), and clap answers with
//! its own words and suggestions, and exits 2. The rules below are glibc's:
//! - short options cluster (`-vvv`), and take their argument attached (`-p11211`) or as
//!   the next word (`-p 11211`);
//! - long options take `--name=value` or `--name value`, and an unambiguous prefix of a
//!   name stands for it (`--verb`);
//! - words that are not options are skipped (memcached ignores them), `--` ends options.

/// Whether an option takes an argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HasArg {
    No,
    Required,
    /// Long form only (`--verbose[=N]`); the short form takes none.
    Optional,
}

/// One option: its short letter and long name (either may be absent) and what it takes.
#[derive(Clone, Copy, Debug)]
pub struct OptSpec {
    pub short: Option<char>,
    pub long: Option<&'static str>,
    pub arg: HasArg,
}

/// Walks `args` (without the program name) and yields each option found, as the index
/// of its spec and its argument, or glibc's message for the first bad one.
pub struct Getopt<'a> {
    prog: &'a str,
    specs: &'a [OptSpec],
    args: &'a [String],
    next: usize,
    /// The rest of a cluster of short options (`-vvv` after the first `v`).
    cluster: String,
    done: bool,
}

impl<'a> Getopt<'a> {
    pub fn new(prog: &'a str, specs: &'a [OptSpec], args: &'a [String]) -> Getopt<'a> {
        Getopt {
            prog,
            specs,
            args,
            next: 0,
            cluster: String::new(),
            done: false,
        }
    }

    fn take_word(&mut self) -> Option<String> {
        let w = self.args.get(self.next).cloned();
        if w.is_some() {
            self.next += 1;
        }
        w
    }

    fn short(&mut self) -> Result<(usize, Option<String>), String> {
        let c = self.cluster.remove(0);
        let Some(i) = self.specs.iter().position(|s| s.short == Some(c)) else {
            return Err(format!("{}: invalid option -- '{c}'", self.prog));
        };
        if self.specs[i].arg != HasArg::Required {
            return Ok((i, None));
        }
        if !self.cluster.is_empty() {
            return Ok((i, Some(std::mem::take(&mut self.cluster))));
        }
        match self.take_word() {
            Some(v) => Ok((i, Some(v))),
            None => Err(format!(
                "{}: option requires an argument -- '{c}'",
                self.prog
            )),
        }
    }

    fn long(&mut self, body: &str) -> Result<(usize, Option<String>), String> {
        let (name, value) = match body.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (body, None),
        };
        let exact = self.specs.iter().position(|s| s.long == Some(name));
        let i = match exact {
            Some(i) => i,
            None => {
                let found: Vec<usize> = (0..self.specs.len())
                    .filter(|&i| self.specs[i].long.is_some_and(|l| l.starts_with(name)))
                    .collect();
                match found[..] {
                    [i] => i,
                    [] => return Err(format!("{}: unrecognized option '--{body}'", self.prog)),
                    _ => {
                        let names: Vec<String> = found
                            .iter()
                            .map(|&i| format!("'--{}'", self.specs[i].long.unwrap_or("")))
                            .collect();
                        return Err(format!(
                            "{}: option '--{name}' is ambiguous; possibilities: {}",
                            self.prog,
                            names.join(" ")
                        ));
                    }
                }
            }
        };
        let full = self.specs[i].long.unwrap_or(name);
        match (self.specs[i].arg, value) {
            (HasArg::No, Some(_)) => Err(format!(
                "{}: option '--{full}' doesn't allow an argument",
                self.prog
            )),
            (HasArg::Required, None) => match self.take_word() {
                Some(v) => Ok((i, Some(v))),
                None => Err(format!(
                    "{}: option '--{full}' requires an argument",
                    self.prog
                )),
            },
            (_, value) => Ok((i, value)),
        }
    }
}

impl Iterator for Getopt<'_> {
    type Item = Result<(usize, Option<String>), String>;

    fn next(&mut self) -> Option<Self::Item> {
        if !self.cluster.is_empty() {
            return Some(self.short());
        }
        while !self.done {
            let word = self.take_word()?;
            if word == "--" {
                self.done = true;
            } else if let Some(body) = word.strip_prefix("--") {
                return Some(self.long(body));
            } else if word.len() > 1 && word.starts_with('-') {
                self.cluster = word[1..].to_string();
                return Some(self.short());
            }
            // Not an option: glibc moves it to the end, and memcached never reads it.
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPECS: &[OptSpec] = &[
        OptSpec {
            short: Some('p'),
            long: Some("port"),
            arg: HasArg::Required,
        },
        OptSpec {
            short: Some('v'),
            long: Some("verbose"),
            arg: HasArg::Optional,
        },
        OptSpec {
            short: None,
            long: Some("pin"),
            arg: HasArg::No,
        },
    ];

    fn run(args: &[&str]) -> Vec<Result<(usize, Option<String>), String>> {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        Getopt::new("prog", SPECS, &args).collect()
    }

    #[test]
    fn glibc_forms() {
        let v = |i: usize, s: &str| Ok((i, Some(s.to_string())));
        assert_eq!(
            run(&["-p1", "-p", "2", "--port=3", "--port", "4"]),
            vec![v(0, "1"), v(0, "2"), v(0, "3"), v(0, "4")]
        );
        assert_eq!(
            run(&["-vv", "x", "--verb", "--", "-p"]),
            vec![Ok((1, None)), Ok((1, None)), Ok((1, None))]
        );
        assert_eq!(run(&["--pi"]), vec![Ok((2, None))]);
    }

    #[test]
    fn glibc_messages() {
        let e = |s: &str| vec![Err::<(usize, Option<String>), String>(s.to_string())];
        assert_eq!(run(&["-q"]), e("prog: invalid option -- 'q'"));
        assert_eq!(run(&["-p"]), e("prog: option requires an argument -- 'p'"));
        assert_eq!(
            run(&["--bogus=1"]),
            e("prog: unrecognized option '--bogus=1'")
        );
        assert_eq!(
            run(&["--port"]),
            e("prog: option '--port' requires an argument")
        );
        assert_eq!(
            run(&["--pin=1"]),
            e("prog: option '--pin' doesn't allow an argument")
        );
        assert_eq!(
            run(&["--p"]),
            e("prog: option '--p' is ambiguous; possibilities: '--port' '--pin'")
        );
    }
}
