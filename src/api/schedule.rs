//! Power schedules: the windows of the week in which a machine runs, in a time zone.
//!
//! Whether a moment falls in a window, and when that next changes, are pure functions of the
//! schedule and the time ([`Schedule::at`]); the controller asks them at each reconcile and
//! sets a timer for the next transition. Local times are read in the schedule's IANA time
//! zone (the time-zone database is built into the binary), so daylight-saving changes move
//! the transitions with the wall clock: a window from 08:00 runs from 08:00 local time on
//! both sides of a change.

use jiff::civil::{Date, Time, Weekday};
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan};
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The windows of the week in which the machine runs; outside them it is stopped or
/// hibernated. `powerState: Stopped` or `Hibernated` keeps it off whatever the schedule says;
/// `powerState: Running` lets the schedule decide. An ended `lifetime` wins over both.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Schedule {
    /// IANA time zone the windows' times are read in, e.g. `Europe/Berlin`, `UTC`.
    #[schemars(length(min = 1, max = 64))]
    pub time_zone: String,
    /// When the machine runs; windows may not overlap.
    #[schemars(length(min = 1, max = 32))]
    pub windows: Vec<Window>,
    /// What the machine is outside the windows: `Stopped` (the default) or `Hibernated`
    /// (Legacy tier).
    #[serde(default)]
    pub outside: OutsideWindows,
}

/// One window: on each of `days`, from `from` until `to` (local time, `HH:MM` or `HH:MM:SS`,
/// within the day).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("self.from.matches('^([01][0-9]|2[0-3]):[0-5][0-9](:[0-5][0-9])?$')").message("from must be a time of day, HH:MM or HH:MM:SS").field_path(".from"),
    validation = Rule::new("self.to.matches('^([01][0-9]|2[0-3]):[0-5][0-9](:[0-5][0-9])?$|^24:00$')").message("to must be a time of day, HH:MM or HH:MM:SS (24:00 for the end of the day)").field_path(".to"),
    validation = Rule::new("self.to > self.from").message("to must be after from: a window lies within one day (use two windows to run across midnight)").field_path(".to"),
)]
pub struct Window {
    /// Days of the week, e.g. `[Mon, Tue, Wed, Thu, Fri]`.
    #[schemars(length(min = 1, max = 7))]
    pub days: Vec<Day>,
    /// Start, local time.
    #[schemars(length(max = 8))]
    pub from: String,
    /// End, local time, after `from`.
    #[schemars(length(max = 8))]
    pub to: String,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum Day {
    Mon,
    Tue,
    Wed,
    Thu,
    Fri,
    Sat,
    Sun,
}

/// What a scheduled machine is outside its windows.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum OutsideWindows {
    #[default]
    Stopped,
    Hibernated,
}

/// Where a schedule stands at a moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Standing {
    /// Whether the moment is in a window.
    pub running: bool,
    /// When that next changes (within the coming eight days; `None` for a schedule that
    /// never changes, such as every day all day).
    pub next_transition: Option<Timestamp>,
}

impl Day {
    pub fn weekday(self) -> Weekday {
        match self {
            Day::Mon => Weekday::Monday,
            Day::Tue => Weekday::Tuesday,
            Day::Wed => Weekday::Wednesday,
            Day::Thu => Weekday::Thursday,
            Day::Fri => Weekday::Friday,
            Day::Sat => Weekday::Saturday,
            Day::Sun => Weekday::Sunday,
        }
    }
}

/// A window's times, read.
struct Span {
    days: Vec<Weekday>,
    from: Time,
    /// `None` for 24:00, the end of the day.
    to: Option<Time>,
}

impl Schedule {
    /// Whether `now` is in a window and when that next changes. Errors name the field: an
    /// unknown time zone, an unreadable time, overlapping windows.
    pub fn at(&self, now: Timestamp) -> Result<Standing, String> {
        let zone = TimeZone::get(&self.time_zone).map_err(|_| {
            format!(
                "spec.schedule.timeZone {:?} is not an IANA time zone (e.g. Europe/Berlin, UTC)",
                self.time_zone
            )
        })?;
        let spans = self.spans()?;
        let running = |at: Timestamp| {
            let local = at.to_zoned(zone.clone());
            let (weekday, time) = (local.weekday(), local.time());
            spans.iter().any(|s| {
                s.days.contains(&weekday) && time >= s.from && s.to.is_none_or(|to| time < to)
            })
        };
        let now_running = running(now);
        // Every window edge of the coming eight days, in order: the first that changes the
        // state is the next transition.
        let today = now.to_zoned(zone.clone()).date();
        let mut edges: Vec<Timestamp> = Vec::new();
        for offset in 0..=8 {
            let date: Date = today
                .checked_add(offset.days())
                .map_err(|e| format!("spec.schedule: {e}"))?;
            for span in &spans {
                if !span.days.contains(&date.weekday()) {
                    continue;
                }
                for time in [Some(span.from), span.to] {
                    let edge = match time {
                        Some(time) => date.to_datetime(time),
                        None => date
                            .checked_add(1.day())
                            .map_err(|e| format!("spec.schedule: {e}"))?
                            .to_datetime(Time::midnight()),
                    };
                    // A local time a daylight-saving change skips or repeats is an edge at
                    // both of its readings; the changes themselves are edges too (below).
                    let readings = zone.to_ambiguous_timestamp(edge);
                    for reading in [readings.earlier(), readings.later()] {
                        let reading = reading.map_err(|e| format!("spec.schedule: {e}"))?;
                        if reading > now {
                            edges.push(reading);
                        }
                    }
                }
            }
        }
        let horizon = now
            .checked_add(jiff::SignedDuration::from_hours(24 * 9))
            .map_err(|e| format!("spec.schedule: {e}"))?;
        edges.extend(
            zone.following(now)
                .map(|transition| transition.timestamp())
                .take_while(|&at| at <= horizon),
        );
        edges.sort();
        let next_transition = edges.into_iter().find(|&edge| running(edge) != now_running);
        Ok(Standing {
            running: now_running,
            next_transition,
        })
    }

    fn spans(&self) -> Result<Vec<Span>, String> {
        let mut spans: Vec<Span> = Vec::new();
        for (i, window) in self.windows.iter().enumerate() {
            let field = |name: &str| format!("spec.schedule.windows[{i}].{name}");
            let from = parse_time(&window.from).ok_or_else(|| {
                format!("{} {:?} is not a time of day", field("from"), window.from)
            })?;
            let to = if window.to == "24:00" {
                None
            } else {
                Some(parse_time(&window.to).ok_or_else(|| {
                    format!("{} {:?} is not a time of day", field("to"), window.to)
                })?)
            };
            if to.is_some_and(|to| to <= from) {
                return Err(format!("{} must be after from", field("to")));
            }
            let span = Span {
                days: window.days.iter().map(|d| d.weekday()).collect(),
                from,
                to,
            };
            for (j, other) in spans.iter().enumerate() {
                let shared_day = span.days.iter().any(|d| other.days.contains(d));
                let before = |a: Option<Time>, b: Time| a.is_some_and(|a| a <= b);
                if shared_day && !before(span.to, other.from) && !before(other.to, span.from) {
                    return Err(format!(
                        "spec.schedule.windows[{i}] overlaps spec.schedule.windows[{j}] on a day both name"
                    ));
                }
            }
            spans.push(span);
        }
        Ok(spans)
    }
}

fn parse_time(text: &str) -> Option<Time> {
    let mut parts = text.split(':');
    let hour: i8 = parts.next()?.parse().ok()?;
    let minute: i8 = parts.next()?.parse().ok()?;
    let second: i8 = match parts.next() {
        Some(s) => s.parse().ok()?,
        None => 0,
    };
    if parts.next().is_some() {
        return None;
    }
    Time::new(hour, minute, second, 0).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weekdays(from: &str, to: &str) -> Window {
        Window {
            days: vec![Day::Mon, Day::Tue, Day::Wed, Day::Thu, Day::Fri],
            from: from.into(),
            to: to.into(),
        }
    }

    fn berlin(windows: Vec<Window>) -> Schedule {
        Schedule {
            time_zone: "Europe/Berlin".into(),
            windows,
            outside: OutsideWindows::Stopped,
        }
    }

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    /// Each case: at `now`, running or not, and the next transition.
    fn expect(schedule: &Schedule, cases: &[(&str, bool, &str)]) {
        for &(now, running, next) in cases {
            assert_eq!(
                schedule.at(at(now)),
                Ok(Standing {
                    running,
                    next_transition: Some(at(next))
                }),
                "{now}"
            );
        }
    }

    #[test]
    fn office_hours_in_berlin_follow_the_wall_clock_across_the_end_of_summer_time() {
        let schedule = berlin(vec![weekdays("08:00", "20:00")]);
        // Summer time ends on Sunday 2026-10-25 (03:00 CEST becomes 02:00 CET).
        let cases = [
            // Friday 10:00 CEST: running until 20:00 CEST (18:00Z).
            ("2026-10-23T08:00:00Z", true, "2026-10-23T18:00:00Z"),
            // Friday 20:00 CEST: stopped until Monday 08:00, now CET (07:00Z).
            ("2026-10-23T18:00:00Z", false, "2026-10-26T07:00:00Z"),
            ("2026-10-25T12:00:00Z", false, "2026-10-26T07:00:00Z"),
            ("2026-10-26T07:00:00Z", true, "2026-10-26T19:00:00Z"),
            // Just before the window opens.
            ("2026-10-26T06:59:59Z", false, "2026-10-26T07:00:00Z"),
        ];
        expect(&schedule, &cases);
    }

    #[test]
    fn a_window_in_the_hour_summer_time_repeats_runs_in_both() {
        // 2026-10-25 in Berlin: 02:00-03:00 happens twice (CEST, then CET from 01:00Z).
        let schedule = berlin(vec![Window {
            days: vec![Day::Sun],
            from: "01:00".into(),
            to: "02:30".into(),
        }]);
        let cases = [
            ("2026-10-25T00:00:00Z", true, "2026-10-25T00:30:00Z"),
            ("2026-10-25T00:30:00Z", false, "2026-10-25T01:00:00Z"),
            ("2026-10-25T01:00:00Z", true, "2026-10-25T01:30:00Z"),
            ("2026-10-25T01:30:00Z", false, "2026-11-01T00:00:00Z"),
        ];
        expect(&schedule, &cases);
    }

    #[test]
    fn a_window_to_midnight_joins_the_next_days_window() {
        let every_day = [
            Day::Mon,
            Day::Tue,
            Day::Wed,
            Day::Thu,
            Day::Fri,
            Day::Sat,
            Day::Sun,
        ];
        let schedule = Schedule {
            time_zone: "UTC".into(),
            windows: vec![
                Window {
                    days: every_day.to_vec(),
                    from: "22:00".into(),
                    to: "24:00".into(),
                },
                Window {
                    days: every_day.to_vec(),
                    from: "00:00".into(),
                    to: "06:00".into(),
                },
            ],
            outside: OutsideWindows::Hibernated,
        };
        assert_eq!(
            schedule.at(at("2026-11-27T23:00:00Z")),
            Ok(Standing {
                running: true,
                next_transition: Some(at("2026-11-28T06:00:00Z"))
            })
        );
        // All day, every day: nothing ever changes.
        let always = Schedule {
            windows: vec![Window {
                days: every_day.to_vec(),
                from: "00:00".into(),
                to: "24:00".into(),
            }],
            ..schedule
        };
        assert_eq!(
            always.at(at("2026-11-27T23:00:00Z")),
            Ok(Standing {
                running: true,
                next_transition: None
            })
        );
    }

    #[test]
    fn bad_schedules_name_the_field() {
        let now = at("2026-11-27T12:00:00Z");
        let unknown = Schedule {
            time_zone: "Mars/Olympus".into(),
            ..berlin(vec![weekdays("08:00", "20:00")])
        };
        assert!(
            unknown
                .at(now)
                .unwrap_err()
                .contains("spec.schedule.timeZone")
        );
        let overlapping = berlin(vec![weekdays("08:00", "12:00"), weekdays("11:00", "14:00")]);
        assert!(
            overlapping
                .at(now)
                .unwrap_err()
                .contains("spec.schedule.windows[1] overlaps spec.schedule.windows[0]")
        );
        let backwards = berlin(vec![weekdays("20:00", "08:00")]);
        assert!(
            backwards
                .at(now)
                .unwrap_err()
                .contains("spec.schedule.windows[0].to must be after from")
        );
        // Touching windows do not overlap.
        let touching = berlin(vec![weekdays("08:00", "12:00"), weekdays("12:00", "14:00")]);
        assert!(touching.at(now).is_ok());
    }
}
