//! PNG plot of Ready objects over time: one line per series (the multi-tenant run's
//! accounts), phase markers, axis titles with units and a legend.
//!
//! Built with plotters' bitmap backend only. Text is drawn with a small built-in pixel font
//! (digits, capitals and a few signs), so the plot needs no font files or font crates.

use plotters::prelude::*;
use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("drawing the plot {path}: {reason}")]
    Draw { path: String, reason: String },
}

/// A vertical marker at a phase boundary.
#[derive(Debug, Clone, Copy)]
pub struct Marker {
    pub seconds: f64,
    pub color: RGBColor,
}

/// One line of the plot: (seconds, Ready objects), named in the legend.
#[derive(Debug, Clone)]
pub struct Series<'a> {
    pub label: String,
    pub points: &'a [(f64, usize)],
}

const WIDTH: u32 = 900;
const HEIGHT: u32 = 440;
const GLYPH_SCALE: i32 = 2;
const X_TITLE: &str = "TIME SINCE START (S)";
const Y_TITLE: &str = "READY OBJECTS";

/// Line colours, one per series in order (repeating past the last).
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// Draws `series` with phase `markers` into a PNG at `path`.
pub fn draw(path: &Path, series: &[Series<'_>], markers: &[Marker]) -> Result<(), Error> {
    let draw_error = |reason: String| Error::Draw {
        path: path.display().to_string(),
        reason,
    };
    let points = || series.iter().flat_map(|s| s.points.iter());
    let max_seconds = points().map(|(t, _)| *t).fold(1.0_f64, f64::max).ceil();
    let max_ready = points().map(|(_, n)| *n).max().unwrap_or(0).max(1) as f64;
    let x_step = nice_step(max_seconds);
    let y_step = nice_step(max_ready);
    let y_top = (max_ready / y_step).ceil() * y_step;

    let root = BitMapBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| draw_error(e.to_string()))?;
    let mut chart = ChartBuilder::on(&root)
        .margin_top(30)
        .margin_right(24)
        .x_label_area_size(48)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..max_seconds, 0.0..y_top)
        .map_err(|e| draw_error(e.to_string()))?;
    let grid = RGBColor(225, 225, 225);
    let mut x = 0.0;
    while x <= max_seconds {
        chart
            .draw_series(LineSeries::new([(x, 0.0), (x, y_top)], grid))
            .map_err(|e| draw_error(e.to_string()))?;
        let (px, py) = chart.backend_coord(&(x, 0.0));
        draw_text(
            &root,
            &format!("{}", x.round() as u64),
            px,
            py + 8,
            Align::Centre,
            BLACK,
        )
        .map_err(|e| draw_error(e.to_string()))?;
        x += x_step;
    }
    let mut y = 0.0;
    while y <= y_top {
        chart
            .draw_series(LineSeries::new([(0.0, y), (max_seconds, y)], grid))
            .map_err(|e| draw_error(e.to_string()))?;
        let (px, py) = chart.backend_coord(&(0.0, y));
        draw_text(
            &root,
            &format!("{}", y.round() as u64),
            px - 8,
            py - 5 * GLYPH_SCALE / 2,
            Align::Right,
            BLACK,
        )
        .map_err(|e| draw_error(e.to_string()))?;
        y += y_step;
    }
    for marker in markers {
        chart
            .draw_series(LineSeries::new(
                [(marker.seconds, 0.0), (marker.seconds, y_top)],
                marker.color.stroke_width(1),
            ))
            .map_err(|e| draw_error(e.to_string()))?;
    }
    for (i, line) in series.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        chart
            .draw_series(LineSeries::new(
                line.points.iter().map(|(t, n)| (*t, *n as f64)),
                color.stroke_width(2),
            ))
            .map_err(|e| draw_error(e.to_string()))?;
    }
    // Axes last, over the grid.
    chart
        .draw_series(LineSeries::new(
            [(0.0, y_top), (0.0, 0.0), (max_seconds, 0.0)],
            BLACK.stroke_width(1),
        ))
        .map_err(|e| draw_error(e.to_string()))?;
    // Axis titles: the x axis's under its numbers, the y axis's above its top.
    let (x_middle, x_axis) = chart.backend_coord(&(max_seconds / 2.0, 0.0));
    draw_text(&root, X_TITLE, x_middle, x_axis + 28, Align::Centre, BLACK)
        .map_err(|e| draw_error(e.to_string()))?;
    let (y_axis, top) = chart.backend_coord(&(0.0, y_top));
    draw_text(&root, Y_TITLE, y_axis - 60, top - 22, Align::Left, BLACK)
        .map_err(|e| draw_error(e.to_string()))?;
    // The legend, top right inside the chart: a stroke of each series' colour and its label.
    let (right, _) = chart.backend_coord(&(max_seconds, y_top));
    let widest = series
        .iter()
        .map(|s| text_width(&s.label))
        .max()
        .unwrap_or(0);
    let left = right - widest - 40;
    for (i, line) in series.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let row = top + 8 + i as i32 * (6 * GLYPH_SCALE + 4);
        root.draw(&Rectangle::new(
            [(left, row + 3), (left + 18, row + 6)],
            color.filled(),
        ))
        .map_err(|e| draw_error(e.to_string()))?;
        draw_text(&root, &line.label, left + 26, row, Align::Left, BLACK)
            .map_err(|e| draw_error(e.to_string()))?;
    }
    root.present().map_err(|e| draw_error(e.to_string()))?;
    Ok(())
}

/// A step of 1, 2 or 5 times a power of ten giving about 5 to 10 ticks.
fn nice_step(range: f64) -> f64 {
    let rough = (range / 8.0).max(1.0);
    let magnitude = 10f64.powf(rough.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|s| *s >= rough)
        .unwrap_or(10.0 * magnitude);
    step.max(1.0)
}

/// 3 x 5 pixel glyphs, one row of three bits per entry, top row first.
fn glyph(ch: char) -> Option<[u8; 5]> {
    Some(match ch.to_ascii_uppercase() {
        '0' => [0b111, 0b101, 0b101, 0b101, 0b111],
        '1' => [0b010, 0b110, 0b010, 0b010, 0b111],
        '2' => [0b111, 0b001, 0b111, 0b100, 0b111],
        '3' => [0b111, 0b001, 0b111, 0b001, 0b111],
        '4' => [0b101, 0b101, 0b111, 0b001, 0b001],
        '5' => [0b111, 0b100, 0b111, 0b001, 0b111],
        '6' => [0b111, 0b100, 0b111, 0b101, 0b111],
        '7' => [0b111, 0b001, 0b001, 0b001, 0b001],
        '8' => [0b111, 0b101, 0b111, 0b101, 0b111],
        '9' => [0b111, 0b101, 0b111, 0b001, 0b111],
        'A' => [0b010, 0b101, 0b111, 0b101, 0b101],
        'B' => [0b110, 0b101, 0b110, 0b101, 0b110],
        'C' => [0b011, 0b100, 0b100, 0b100, 0b011],
        'D' => [0b110, 0b101, 0b101, 0b101, 0b110],
        'E' => [0b111, 0b100, 0b110, 0b100, 0b111],
        'F' => [0b111, 0b100, 0b110, 0b100, 0b100],
        'G' => [0b011, 0b100, 0b101, 0b101, 0b011],
        'H' => [0b101, 0b101, 0b111, 0b101, 0b101],
        'I' => [0b111, 0b010, 0b010, 0b010, 0b111],
        'J' => [0b001, 0b001, 0b001, 0b101, 0b010],
        'K' => [0b101, 0b101, 0b110, 0b101, 0b101],
        'L' => [0b100, 0b100, 0b100, 0b100, 0b111],
        'M' => [0b101, 0b111, 0b111, 0b101, 0b101],
        'N' => [0b110, 0b101, 0b101, 0b101, 0b101],
        'O' => [0b010, 0b101, 0b101, 0b101, 0b010],
        'P' => [0b110, 0b101, 0b110, 0b100, 0b100],
        'Q' => [0b010, 0b101, 0b101, 0b110, 0b011],
        'R' => [0b110, 0b101, 0b110, 0b101, 0b101],
        'S' => [0b011, 0b100, 0b010, 0b001, 0b110],
        'T' => [0b111, 0b010, 0b010, 0b010, 0b010],
        'U' => [0b101, 0b101, 0b101, 0b101, 0b111],
        'V' => [0b101, 0b101, 0b101, 0b101, 0b010],
        'W' => [0b101, 0b101, 0b111, 0b111, 0b101],
        'X' => [0b101, 0b101, 0b010, 0b101, 0b101],
        'Y' => [0b101, 0b101, 0b010, 0b010, 0b010],
        'Z' => [0b111, 0b001, 0b010, 0b100, 0b111],
        '(' => [0b010, 0b100, 0b100, 0b100, 0b010],
        ')' => [0b010, 0b001, 0b001, 0b001, 0b010],
        '/' => [0b001, 0b001, 0b010, 0b100, 0b100],
        '-' => [0b000, 0b000, 0b111, 0b000, 0b000],
        '.' => [0b000, 0b000, 0b000, 0b000, 0b010],
        ',' => [0b000, 0b000, 0b000, 0b010, 0b100],
        ':' => [0b000, 0b010, 0b000, 0b010, 0b000],
        '=' => [0b000, 0b111, 0b000, 0b111, 0b000],
        ' ' => [0; 5],
        _ => return None,
    })
}

/// Where a text's x coordinate is.
#[derive(Debug, Clone, Copy)]
enum Align {
    Left,
    Centre,
    Right,
}

const ADVANCE: i32 = 4 * GLYPH_SCALE;

fn text_width(text: &str) -> i32 {
    text.chars().count() as i32 * ADVANCE - GLYPH_SCALE
}

/// Draws `text` in the pixel font with its top at y; characters without a glyph are left
/// blank.
fn draw_text<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    text: &str,
    x: i32,
    y: i32,
    align: Align,
    color: RGBColor,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let width = text_width(text);
    let left = match align {
        Align::Left => x,
        Align::Centre => x - width / 2,
        Align::Right => x - width,
    };
    for (i, ch) in text.chars().enumerate() {
        let Some(glyph) = glyph(ch) else {
            continue;
        };
        let glyph_left = left + i as i32 * ADVANCE;
        for (row, bits) in glyph.iter().enumerate() {
            for column in 0..3 {
                if bits & (0b100 >> column) != 0 {
                    let px = glyph_left + column * GLYPH_SCALE;
                    let py = y + row as i32 * GLYPH_SCALE;
                    area.draw(&Rectangle::new(
                        [(px, py), (px + GLYPH_SCALE - 1, py + GLYPH_SCALE - 1)],
                        color.filled(),
                    ))?;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_round() {
        assert_eq!(nice_step(10_000.0), 2000.0);
        assert_eq!(nice_step(300.0), 50.0);
        assert_eq!(nice_step(3.0), 1.0);
    }

    #[test]
    fn every_title_and_legend_character_has_a_glyph() {
        for text in [
            X_TITLE,
            Y_TITLE,
            "all objects",
            "account 10",
            "ready machines",
        ] {
            assert!(text.chars().all(|c| glyph(c).is_some()), "{text}");
        }
    }

    #[test]
    fn a_png_is_written() {
        let directory =
            std::env::temp_dir().join(format!("scale-bench-plot-{}", std::process::id()));
        std::fs::create_dir_all(&directory).unwrap_or_else(|e| panic!("{e}"));
        let path = directory.join("ready.png");
        let first: Vec<(f64, usize)> = (0..100).map(|i| (i as f64, i * 10)).collect();
        let second: Vec<(f64, usize)> = (0..80).map(|i| (i as f64, i * 12)).collect();
        let series = [
            Series {
                label: "account 0".into(),
                points: &first,
            },
            Series {
                label: "account 1".into(),
                points: &second,
            },
        ];
        draw(
            &path,
            &series,
            &[Marker {
                seconds: 50.0,
                color: RED,
            }],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(&bytes[1..4], b"PNG");
        let _ = std::fs::remove_dir_all(&directory);
    }
}
