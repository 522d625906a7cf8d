//! PNG plot of Ready objects over time.
//!
//! Built with plotters' bitmap backend only. Tick labels are drawn with a small built-in
//! pixel font for digits, so the plot needs no font files or font crates.

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

const WIDTH: u32 = 900;
const HEIGHT: u32 = 420;
const GLYPH_SCALE: i32 = 2;

/// Draws `timeline` ((seconds, Ready objects)) with phase `markers` into a PNG at `path`.
pub fn draw(path: &Path, timeline: &[(f64, usize)], markers: &[Marker]) -> Result<(), Error> {
    let draw_error = |reason: String| Error::Draw {
        path: path.display().to_string(),
        reason,
    };
    let max_seconds = timeline
        .iter()
        .map(|(t, _)| *t)
        .fold(1.0_f64, f64::max)
        .ceil();
    let max_ready = timeline.iter().map(|(_, n)| *n).max().unwrap_or(0).max(1) as f64;
    let x_step = nice_step(max_seconds);
    let y_step = nice_step(max_ready);
    let y_top = (max_ready / y_step).ceil() * y_step;

    let root = BitMapBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| draw_error(e.to_string()))?;
    let mut chart = ChartBuilder::on(&root)
        .margin_top(16)
        .margin_right(24)
        .x_label_area_size(36)
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
        draw_number(&root, x.round() as u64, px, py + 8, true)
            .map_err(|e| draw_error(e.to_string()))?;
        x += x_step;
    }
    let mut y = 0.0;
    while y <= y_top {
        chart
            .draw_series(LineSeries::new([(0.0, y), (max_seconds, y)], grid))
            .map_err(|e| draw_error(e.to_string()))?;
        let (px, py) = chart.backend_coord(&(0.0, y));
        draw_number(
            &root,
            y.round() as u64,
            px - 8,
            py - 5 * GLYPH_SCALE / 2,
            false,
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
    chart
        .draw_series(LineSeries::new(
            timeline.iter().map(|(t, n)| (*t, *n as f64)),
            BLUE.stroke_width(2),
        ))
        .map_err(|e| draw_error(e.to_string()))?;
    // Axes last, over the grid.
    chart
        .draw_series(LineSeries::new(
            [(0.0, y_top), (0.0, 0.0), (max_seconds, 0.0)],
            BLACK.stroke_width(1),
        ))
        .map_err(|e| draw_error(e.to_string()))?;
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

/// 3 x 5 pixel digits, one row of three bits per entry, top row first.
const DIGITS: [[u8; 5]; 10] = [
    [0b111, 0b101, 0b101, 0b101, 0b111],
    [0b010, 0b110, 0b010, 0b010, 0b111],
    [0b111, 0b001, 0b111, 0b100, 0b111],
    [0b111, 0b001, 0b111, 0b001, 0b111],
    [0b101, 0b101, 0b111, 0b001, 0b001],
    [0b111, 0b100, 0b111, 0b001, 0b111],
    [0b111, 0b100, 0b111, 0b101, 0b111],
    [0b111, 0b001, 0b001, 0b001, 0b001],
    [0b111, 0b101, 0b111, 0b101, 0b111],
    [0b111, 0b101, 0b111, 0b001, 0b111],
];

/// Draws `value`, centred on x (`centred`) or right-aligned to x, with its top at y.
fn draw_number<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    value: u64,
    x: i32,
    y: i32,
    centred: bool,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let text = value.to_string();
    let advance = 4 * GLYPH_SCALE;
    let width = text.len() as i32 * advance - GLYPH_SCALE;
    let left = if centred { x - width / 2 } else { x - width };
    for (i, ch) in text.chars().enumerate() {
        let Some(glyph) = ch.to_digit(10).and_then(|d| DIGITS.get(d as usize)) else {
            continue;
        };
        let glyph_left = left + i as i32 * advance;
        for (row, bits) in glyph.iter().enumerate() {
            for column in 0..3 {
                if bits & (0b100 >> column) != 0 {
                    let px = glyph_left + column * GLYPH_SCALE;
                    let py = y + row as i32 * GLYPH_SCALE;
                    area.draw(&Rectangle::new(
                        [(px, py), (px + GLYPH_SCALE - 1, py + GLYPH_SCALE - 1)],
                        BLACK.filled(),
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
    fn a_png_is_written() {
        let directory =
            std::env::temp_dir().join(format!("scale-bench-plot-{}", std::process::id()));
        std::fs::create_dir_all(&directory).unwrap_or_else(|e| panic!("{e}"));
        let path = directory.join("ready.png");
        let timeline: Vec<(f64, usize)> = (0..100).map(|i| (i as f64, i * 10)).collect();
        draw(
            &path,
            &timeline,
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
