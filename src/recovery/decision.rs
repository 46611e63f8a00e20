//! Recovery's decision for one segment file, as data: the facts read
//! from the file ([`FileFacts`]), the table of rows over them ([`ROWS`],
//! printed in the module docs of `recovery`), and [`decide`], the one row
//! that matches.

use crate::scan::table::{Is, ANY, NO, YES};
use crate::scan::{HeaderProblem, Verdict};

use super::Policy;

/// What reading a segment file's header found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum HeaderRead {
    /// It decodes, and agrees with the file's name and the log.
    Usable,
    /// A crash while the segment was being created left it
    /// ([`HeaderProblem::NeverWritten`]).
    NeverWritten,
    /// Any other [`HeaderProblem`]: lost, misshapen, invalid, a base out of
    /// range, a name it contradicts, another log's, a file longer than it
    /// declares.
    Damaged,
}

impl HeaderRead {
    pub fn of(problem: &HeaderProblem) -> HeaderRead {
        if problem.never_written() {
            HeaderRead::NeverWritten
        } else {
            HeaderRead::Damaged
        }
    }
}

/// Where a never-written newest file's name has the log resume.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum BlankName {
    /// In `1..=MAX_LSN`, and at most the last LSN kept + 1.
    Resumes,
    /// Outside `1..=MAX_LSN` (or no segment's name): no name a writer makes.
    OutOfRange,
    /// Past the last LSN kept + 1: resuming there would skip LSNs.
    PastNext,
}

/// How the segment's frames end: the class of its [`Verdict`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Ending {
    Clean,
    Full,
    Torn,
    Corrupt,
}

impl Ending {
    pub fn of(verdict: Verdict) -> Ending {
        match verdict {
            Verdict::Clean => Ending::Clean,
            Verdict::Full => Ending::Full,
            Verdict::Torn { .. } => Ending::Torn,
            Verdict::Corrupt(_) => Ending::Corrupt,
        }
    }
}

/// What recovery decides a file from, each of a small domain. A fact is
/// read only where some row tells its values apart
/// (`FileFacts::reads_name`, [`FileFacts::reads_follows`],
/// [`FileFacts::reads_ending`]); one not read holds the value
/// [`FileFacts::new`] gives it, which then cannot change the decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct FileFacts {
    /// The newest file listed.
    pub newest: bool,
    pub header: HeaderRead,
    /// A never-written newest file's name; `Resumes` if not read.
    pub name: BlankName,
    /// The base LSN is the previous segment's last + 1, or there is no
    /// previous one in this run; `true` if not read.
    pub follows: bool,
    /// `Clean` if not read.
    pub ending: Ending,
    pub policy: Policy,
}

impl FileFacts {
    /// The facts of a file whose header read as `header`, before any
    /// other fact is read.
    pub fn new(newest: bool, header: HeaderRead, policy: Policy) -> FileFacts {
        FileFacts {
            newest,
            header,
            name: BlankName::Resumes,
            follows: true,
            ending: Ending::Clean,
            policy,
        }
    }

    /// Whether the name is held against the log (once every segment
    /// before it is read): only a never-written newest file's is, which
    /// `judge_incomplete` alone judges.
    #[cfg(test)]
    pub fn reads_name(&self) -> bool {
        self.newest && self.header == HeaderRead::NeverWritten
    }

    /// Whether the base LSN is held against the previous segment's last.
    pub fn reads_follows(&self) -> bool {
        self.header == HeaderRead::Usable
    }

    /// Whether the frames are walked and their end judged.
    pub fn reads_ending(&self) -> bool {
        self.reads_follows() && (self.follows || self.policy == Policy::ReportAll)
    }
}

/// The problems a file adds to the analysis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Report {
    Nothing,
    /// Damage: in the header, the name, or the frames.
    Corrupt,
    /// The LSNs do not run on into this file.
    Gap,
    /// Both, the gap first.
    GapAndCorrupt,
}

impl Report {
    pub fn gap(self) -> bool {
        matches!(self, Report::Gap | Report::GapAndCorrupt)
    }

    pub fn corrupt(self) -> bool {
        matches!(self, Report::Corrupt | Report::GapAndCorrupt)
    }
}

/// What becomes of the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Fate {
    /// Removed: what a crash mid-create left, holding nothing.
    Discard,
    /// Not part of the log kept; a strict open fails on the problem, a
    /// verify reads the next segment as the start of a new run.
    Drop,
    /// Point in time: renamed out of the log, unread past its problem.
    SetAside,
    /// Kept as it is.
    Keep,
    /// Kept up to the end of its complete data; the rest is cut.
    Cut,
}

/// One row: a pattern per fact, and the decision.
#[derive(Clone, Copy, Debug)]
pub(super) struct Row {
    pub newest: Is<bool>,
    pub header: Is<HeaderRead>,
    pub name: Is<BlankName>,
    pub follows: Is<bool>,
    pub ending: Is<Ending>,
    pub policy: Is<Policy>,
    pub report: Report,
    pub fate: Fate,
}

impl Row {
    pub fn matches(&self, f: &FileFacts) -> bool {
        self.newest.matches(&f.newest)
            && self.header.matches(&f.header)
            && self.name.matches(&f.name)
            && self.follows.matches(&f.follows)
            && self.ending.matches(&f.ending)
            && self.policy.matches(&f.policy)
    }
}

/// The table (the module docs of `recovery` print it): every combination
/// of [`FileFacts`] matches exactly one row, which the tests check for
/// every combination.
///
/// Why: only the newest file can be one a crash interrupted while
/// creating it (a writer installs one segment at a time), and its name is
/// where the log resumes when no segment survives, so it must be a name a
/// writer makes, one past the last LSN kept. Any other unusable header is
/// damage, and so is a blank one anywhere else. LSNs must run on from
/// segment to segment. A strict open fails on the first problem; point in
/// time keeps what is before it (the valid prefix of a damaged segment,
/// its tail cut) and sets every later file aside; verify reads on, taking
/// a segment after a gap as the start of a new run.
#[rustfmt::skip]
pub(super) const ROWS: [Row; 16] = {
    use BlankName::{OutOfRange, PastNext, Resumes};
    use Ending::{Clean, Corrupt, Full, Torn};
    use HeaderRead::{Damaged, NeverWritten, Usable};
    use Is::{Any, In};
    use Policy::{ReportAll, SetAsideAfterFirst, StopAtFirst};
    const STRICT: Is<Policy> = In(&[StopAtFirst]);
    const PIT: Is<Policy> = In(&[SetAsideAfterFirst]);
    const VERIFY: Is<Policy> = In(&[ReportAll]);
    const NOT_PIT: Is<Policy> = In(&[StopAtFirst, ReportAll]);
    // One pattern per fact, in the order of `FileFacts`' fields.
    type When = (Is<bool>, Is<HeaderRead>, Is<BlankName>, Is<bool>, Is<Ending>, Is<Policy>);
    const fn row(when: When, report: Report, fate: Fate) -> Row {
        let (newest, header, name, follows, ending, policy) = when;
        Row { newest, header, name, follows, ending, policy, report, fate }
    }
    [
        //   newest header             name               follows ending              policy    reported               the file
        row((YES, In(&[NeverWritten]), In(&[Resumes]),    ANY, Any,                 Any),     Report::Nothing,       Fate::Discard),
        row((YES, In(&[NeverWritten]), In(&[OutOfRange]), ANY, Any,                 Any),     Report::Corrupt,       Fate::Discard),
        row((YES, In(&[NeverWritten]), In(&[PastNext]),   ANY, Any,                 Any),     Report::Gap,           Fate::Discard),
        row((NO,  In(&[NeverWritten]), Any,               ANY, Any,                 PIT),     Report::Corrupt,       Fate::SetAside),
        row((NO,  In(&[NeverWritten]), Any,               ANY, Any,                 NOT_PIT), Report::Corrupt,       Fate::Drop),
        row((ANY, In(&[Damaged]),      Any,               ANY, Any,                 PIT),     Report::Corrupt,       Fate::SetAside),
        row((ANY, In(&[Damaged]),      Any,               ANY, Any,                 NOT_PIT), Report::Corrupt,       Fate::Drop),
        row((ANY, In(&[Usable]),       Any,               NO,  Any,                 STRICT),  Report::Gap,           Fate::Drop),
        row((ANY, In(&[Usable]),       Any,               NO,  Any,                 PIT),     Report::Gap,           Fate::SetAside),
        row((ANY, In(&[Usable]),       Any,               NO,  In(&[Clean, Full]),  VERIFY),  Report::Gap,           Fate::Keep),
        row((ANY, In(&[Usable]),       Any,               NO,  In(&[Torn]),         VERIFY),  Report::Gap,           Fate::Cut),
        row((ANY, In(&[Usable]),       Any,               NO,  In(&[Corrupt]),      VERIFY),  Report::GapAndCorrupt, Fate::Drop),
        row((ANY, In(&[Usable]),       Any,               YES, In(&[Clean, Full]),  Any),     Report::Nothing,       Fate::Keep),
        row((ANY, In(&[Usable]),       Any,               YES, In(&[Torn]),         Any),     Report::Nothing,       Fate::Cut),
        row((ANY, In(&[Usable]),       Any,               YES, In(&[Corrupt]),      NOT_PIT), Report::Corrupt,       Fate::Drop),
        row((ANY, In(&[Usable]),       Any,               YES, In(&[Corrupt]),      PIT),     Report::Corrupt,       Fate::Cut),
    ]
};

/// The decision of the one row of [`ROWS`] that matches `facts`. Pure.
pub(super) fn decide(facts: &FileFacts) -> (Report, Fate) {
    let mut rows = ROWS.iter().filter(|r| r.matches(facts));
    // The tests enumerate every combination of the facts: each has a row.
    let row = rows.next().expect("a row for every combination of facts");
    debug_assert!(rows.next().is_none(), "two rows match {facts:?}");
    (row.report, row.fate)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scan::table::doc::{assert_documented, cell, markdown, Label};

    const BOOLS: [bool; 2] = [false, true];
    const HEADERS: [HeaderRead; 3] = [
        HeaderRead::Usable,
        HeaderRead::NeverWritten,
        HeaderRead::Damaged,
    ];
    const NAMES: [BlankName; 3] = [
        BlankName::Resumes,
        BlankName::OutOfRange,
        BlankName::PastNext,
    ];
    const ENDINGS: [Ending; 4] = [Ending::Clean, Ending::Full, Ending::Torn, Ending::Corrupt];
    const POLICIES: [Policy; 3] = [
        Policy::StopAtFirst,
        Policy::SetAsideAfterFirst,
        Policy::ReportAll,
    ];

    /// Every combination of the facts' domains.
    fn every() -> Vec<FileFacts> {
        let mut all = Vec::new();
        for newest in BOOLS {
            for header in HEADERS {
                for name in NAMES {
                    for follows in BOOLS {
                        for ending in ENDINGS {
                            for policy in POLICIES {
                                all.push(FileFacts {
                                    newest,
                                    header,
                                    name,
                                    follows,
                                    ending,
                                    policy,
                                });
                            }
                        }
                    }
                }
            }
        }
        all
    }

    #[test]
    fn every_combination_of_file_facts_matches_exactly_one_row() {
        let all = every();
        assert_eq!(all.len(), 2 * 3 * 3 * 2 * 4 * 3);
        let wrong: Vec<_> = all
            .iter()
            .map(|f| (f, ROWS.iter().filter(|r| r.matches(f)).count()))
            .filter(|&(_, n)| n != 1)
            .collect();
        assert!(wrong.is_empty(), "(facts, rows matching): {wrong:#?}");
        for (i, row) in ROWS.iter().enumerate() {
            assert!(
                all.iter().any(|f| row.matches(f)),
                "row {i} matches nothing"
            );
        }
    }

    /// What docs/format.md (sections 2.1 and 6) says of a file with these
    /// facts, and what the recovery module's docs and [`Policy`]'s say
    /// each policy does with a problem.
    fn docs_say(f: &FileFacts) -> (Report, Fate) {
        // 2.1: only the newest never-written file is discarded, and its
        // name must be neither outside 1..=MAX_LSN (corrupt) nor past the
        // last LSN + 1 (gap).
        if f.header == HeaderRead::NeverWritten && f.newest {
            let report = match f.name {
                BlankName::Resumes => Report::Nothing,
                BlankName::OutOfRange => Report::Corrupt,
                BlankName::PastNext => Report::Gap,
            };
            return (report, Fate::Discard);
        }
        // 2.1: an older never-written file, and every other unusable
        // header, is damage. 6: a base LSN not the previous last + 1 is a
        // gap; verify reads on past one, the others stop there.
        let usable = f.header == HeaderRead::Usable;
        let gap = usable && !f.follows;
        let walked = usable && (!gap || f.policy == Policy::ReportAll);
        let corrupt = !usable || (walked && f.ending == Ending::Corrupt);
        let report = match (gap, corrupt) {
            (false, false) => Report::Nothing,
            (false, true) => Report::Corrupt,
            (true, false) => Report::Gap,
            (true, true) => Report::GapAndCorrupt,
        };
        let fate = match (walked, f.ending, f.policy) {
            // Clean and full ends are kept, a torn tail is cut...
            (true, Ending::Clean | Ending::Full, _) => Fate::Keep,
            (true, Ending::Torn, _) => Fate::Cut,
            // ...and so is whatever follows the valid prefix of a
            // damaged segment in point-in-time mode, which sets aside
            // a file it cannot read up to its problem.
            (true, Ending::Corrupt, Policy::SetAsideAfterFirst) => Fate::Cut,
            (false, _, Policy::SetAsideAfterFirst) => Fate::SetAside,
            // A strict open fails; verify names it and reads on.
            (_, _, Policy::StopAtFirst | Policy::ReportAll) => Fate::Drop,
        };
        (report, fate)
    }

    #[test]
    fn every_combination_is_decided_as_the_docs_say() {
        for f in every() {
            assert_eq!(decide(&f), docs_say(&f), "{f:?}");
        }
    }

    #[test]
    fn no_file_leaves_the_log_unread_or_unreported() {
        for f in every() {
            let (report, fate) = decide(&f);
            match fate {
                // Only what a crash mid-create left goes without a word.
                Fate::Discard => assert!(f.reads_name(), "{f:?}"),
                Fate::Drop | Fate::SetAside => assert_ne!(report, Report::Nothing, "{f:?}"),
                // A segment is kept only once its frames were judged.
                Fate::Keep | Fate::Cut => assert!(f.reads_ending(), "{f:?}"),
            }
            if fate == Fate::SetAside {
                assert_eq!(f.policy, Policy::SetAsideAfterFirst, "{f:?}");
            }
        }
    }

    #[test]
    fn file_facts_left_unread_cannot_change_the_decision() {
        for f in every() {
            let d = decide(&f);
            if !f.reads_name() {
                for name in NAMES {
                    assert_eq!(decide(&FileFacts { name, ..f }), d, "{f:?}");
                }
            }
            if !f.reads_follows() {
                for follows in BOOLS {
                    assert_eq!(decide(&FileFacts { follows, ..f }), d, "{f:?}");
                }
            }
            if !f.reads_ending() {
                for ending in ENDINGS {
                    assert_eq!(decide(&FileFacts { ending, ..f }), d, "{f:?}");
                }
            }
        }
    }

    impl Label for HeaderRead {
        fn label(self) -> &'static str {
            match self {
                HeaderRead::Usable => "usable",
                HeaderRead::NeverWritten => "never written",
                HeaderRead::Damaged => "damaged",
            }
        }
    }

    impl Label for BlankName {
        fn label(self) -> &'static str {
            match self {
                BlankName::Resumes => "resumes the log",
                BlankName::OutOfRange => "out of range",
                BlankName::PastNext => "past last + 1",
            }
        }
    }

    impl Label for Ending {
        fn label(self) -> &'static str {
            match self {
                Ending::Clean => "`Clean`",
                Ending::Full => "`Full`",
                Ending::Torn => "`Torn`",
                Ending::Corrupt => "`Corrupt`",
            }
        }
    }

    impl Label for Policy {
        fn label(self) -> &'static str {
            match self {
                Policy::StopAtFirst => "strict",
                Policy::SetAsideAfterFirst => "point in time",
                Policy::ReportAll => "verify",
            }
        }
    }

    impl Label for Report {
        fn label(self) -> &'static str {
            match self {
                Report::Nothing => "-",
                Report::Corrupt => "`Corrupt`",
                Report::Gap => "`Gap`",
                Report::GapAndCorrupt => "`Gap`, `Corrupt`",
            }
        }
    }

    impl Label for Fate {
        fn label(self) -> &'static str {
            match self {
                Fate::Discard => "discarded",
                Fate::Drop => "not kept",
                Fate::SetAside => "set aside",
                Fate::Keep => "kept",
                Fate::Cut => "kept, tail cut",
            }
        }
    }

    #[test]
    fn the_recovery_module_docs_print_the_table() {
        let rows: Vec<Vec<String>> = ROWS
            .iter()
            .map(|r| {
                vec![
                    cell(r.newest),
                    cell(r.header),
                    cell(r.name),
                    cell(r.follows),
                    cell(r.ending),
                    cell(r.policy),
                    r.report.label().to_string(),
                    r.fate.label().to_string(),
                ]
            })
            .collect();
        let want = markdown(
            &[
                "newest",
                "header",
                "name",
                "follows",
                "frames end",
                "policy",
                "reported",
                "the file",
            ],
            &rows,
        );
        assert_documented(include_str!("mod.rs"), &want);
    }
}
