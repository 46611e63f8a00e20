//! Decision tables kept as data: a row is a pattern per fact and a
//! verdict, and a decision is the one row whose patterns all match. The
//! segment-end verdict (`verdict.rs`) and recovery's per-file decision are
//! such tables; their tests enumerate every combination of the facts and
//! print the rows into the module docs they are described in.

/// A pattern over one fact: any value, or one of these.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Is<T: 'static> {
    /// Every value.
    Any,
    /// One of these values.
    In(&'static [T]),
}

impl<T: PartialEq> Is<T> {
    /// Whether `v` matches. Cost: a look at each listed value.
    pub fn matches(&self, v: &T) -> bool {
        match self {
            Is::Any => true,
            Is::In(vs) => vs.contains(v),
        }
    }
}

/// A `bool` fact that must hold.
pub(crate) const YES: Is<bool> = Is::In(&[true]);
/// A `bool` fact that must not hold.
pub(crate) const NO: Is<bool> = Is::In(&[false]);
/// A `bool` fact either way.
pub(crate) const ANY: Is<bool> = Is::Any;

/// Printing a table's rows as the Markdown table of its module docs.
#[cfg(test)]
pub(crate) mod doc {
    use super::Is;

    /// How a table cell prints a value.
    pub(crate) trait Label: Copy + 'static {
        fn label(self) -> &'static str;
    }

    impl Label for bool {
        fn label(self) -> &'static str {
            if self {
                "yes"
            } else {
                "no"
            }
        }
    }

    /// A pattern as a cell: "any", or its values.
    pub(crate) fn cell<T: Label>(p: Is<T>) -> String {
        match p {
            Is::Any => "any".into(),
            Is::In(vs) => vs.iter().map(|v| v.label()).collect::<Vec<_>>().join(", "),
        }
    }

    /// `rows` under `head` as a Markdown table with aligned columns.
    pub(crate) fn markdown(head: &[&str], rows: &[Vec<String>]) -> Vec<String> {
        let widths: Vec<usize> = (0..head.len())
            .map(|c| {
                rows.iter()
                    .map(|r| r[c].chars().count())
                    .chain([head[c].chars().count()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let line = |cells: &[String]| {
            let cells: Vec<String> = cells
                .iter()
                .zip(&widths)
                .map(|(c, &w)| format!(" {c}{} ", " ".repeat(w - c.chars().count())))
                .collect();
            format!("|{}|", cells.join("|"))
        };
        let rule: Vec<String> = widths.iter().map(|&w| "-".repeat(w + 2)).collect();
        let head: Vec<String> = head.iter().map(|h| h.to_string()).collect();
        let mut out = vec![line(&head), format!("|{}|", rule.join("|"))];
        out.extend(rows.iter().map(|r| line(r)));
        out
    }

    /// Assert that the Markdown table in the module docs (`//! |` lines)
    /// of `source` is `want`, printing the lines it should have if not.
    pub(crate) fn assert_documented(source: &str, want: &[String]) {
        let got: Vec<&str> = source
            .lines()
            .filter_map(|l| l.strip_prefix("//! "))
            .filter(|l| l.starts_with('|'))
            .collect();
        assert!(
            got == want,
            "the module docs' table is not the rows; it should read:\n{}",
            want.iter()
                .map(|l| format!("//! {l}"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}
