//! A line chart of percentages as an SVG file, written by hand: the one chart `bload sweep` draws
//! needs axes, a legend and a few paths, not a plotting library.
//!
//! The y axis always runs from 0 to 100 %, so that charts of different datasets compare at a
//! glance; the x axis spans the given range, with ticks at round numbers.

use std::fmt::Write;

const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 480.0;
/// The plot area: left, top, right, bottom. Room on the left for the y labels, above for the
/// title and legend, below for the x labels.
const PLOT: (f64, f64, f64, f64) = (72.0, 96.0, 736.0, 416.0);

/// One line of the chart.
pub struct Line<'a> {
    pub label: &'a str,
    pub color: &'a str,
    pub width: f64,
    /// `stroke-dasharray`, for a dashed line (drawn without markers).
    pub dash: Option<&'a str>,
    /// (x, y in percent, tooltip) of each point; `None` where there is no value breaks the line.
    pub points: Vec<Option<(f64, f64, String)>>,
}

impl Line<'_> {
    /// The SVG attribute that dashes the line and its legend sample alike; empty for a solid one.
    fn dash_attribute(&self) -> String {
        self.dash
            .map(|dash| format!(r#" stroke-dasharray="{dash}""#))
            .unwrap_or_default()
    }
}

pub struct Chart<'a> {
    pub title: &'a str,
    pub subtitle: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    /// The x axis runs from the first to the second, which is larger.
    pub x_range: (f64, f64),
    pub lines: Vec<Line<'a>>,
    /// An x interval to shade grey (where there are no values), with the lines of a note in it.
    pub shade: Option<(f64, f64, [String; 4])>,
}

/// The SVG document of `chart`.
pub fn render(chart: &Chart) -> String {
    let (left, top, right, bottom) = PLOT;
    let (x_first, x_last) = chart.x_range;
    let span = (x_last - x_first).max(f64::MIN_POSITIVE);
    let x_at = |x: f64| left + (x - x_first) / span * (right - left);
    let y_at = |percent: f64| bottom - percent.clamp(0.0, 100.0) / 100.0 * (bottom - top);
    let mut svg = String::new();
    // Writing to a String cannot fail; the results are ignored throughout.
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="13">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let middle = (left + right) / 2.0;
    let _ = writeln!(
        svg,
        r#"<text x="{middle}" y="26" text-anchor="middle" font-size="17" font-weight="bold">{}</text>"#,
        escape(chart.title)
    );
    let _ = writeln!(
        svg,
        r##"<text x="{middle}" y="46" text-anchor="middle" fill="#555">{}</text>"##,
        escape(chart.subtitle)
    );
    legend(&mut svg, &chart.lines, middle, 72.0);

    if let Some((from, to, note)) = &chart.shade {
        let (x0, x1) = (x_at(*from), x_at(*to));
        let _ = writeln!(
            svg,
            r##"<rect x="{x0:.1}" y="{top}" width="{:.1}" height="{}" fill="#ececec"/>"##,
            x1 - x0,
            bottom - top
        );
        // Where the band is too narrow for the note, the empty lines say enough.
        let room = x1 - x0 >= 7.0 * note.iter().map(|line| line.len()).max().unwrap_or(0) as f64;
        for (number, line) in note.iter().enumerate().filter(|_| room) {
            let _ = writeln!(
                svg,
                r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="12" fill="#666">{}</text>"##,
                (x0 + x1) / 2.0,
                (top + bottom) / 2.0 - 24.0 + 16.0 * number as f64,
                escape(line)
            );
        }
    }
    // Grid and y axis: a line every 10 %, labelled every 20 %.
    for percent in (0..=100).step_by(10) {
        let y = y_at(f64::from(percent));
        let _ = writeln!(
            svg,
            r##"<line x1="{left}" y1="{y:.1}" x2="{right}" y2="{y:.1}" stroke="#dddddd"/>"##
        );
        if percent % 20 == 0 {
            let _ = writeln!(
                svg,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{percent}%</text>"#,
                left - 8.0,
                y + 4.5
            );
        }
    }
    let step = tick_step(span);
    let mut tick = (x_first / step).ceil() * step;
    while tick <= x_last {
        let x = x_at(tick);
        let _ = writeln!(
            svg,
            r##"<line x1="{x:.1}" y1="{top}" x2="{x:.1}" y2="{bottom}" stroke="#eeeeee"/><line x1="{x:.1}" y1="{bottom}" x2="{x:.1}" y2="{:.1}" stroke="#333"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{tick}</text>"##,
            bottom + 5.0,
            bottom + 20.0
        );
        tick += step;
    }
    let _ = writeln!(
        svg,
        r##"<rect x="{left}" y="{top}" width="{}" height="{}" fill="none" stroke="#333"/>"##,
        right - left,
        bottom - top
    );
    let _ = writeln!(
        svg,
        r#"<text x="{middle}" y="{}" text-anchor="middle">{}</text>"#,
        bottom + 44.0,
        escape(chart.x_label)
    );
    let y_middle = (top + bottom) / 2.0;
    let _ = writeln!(
        svg,
        r#"<text x="20" y="{y_middle}" text-anchor="middle" transform="rotate(-90 20 {y_middle})">{}</text>"#,
        escape(chart.y_label)
    );

    for line in &chart.lines {
        // A path per line, with a move wherever a point is missing.
        let mut path = String::new();
        let mut drawing = false;
        for point in &line.points {
            match point {
                Some((x, y, _)) => {
                    let command = if drawing { 'L' } else { 'M' };
                    let _ = write!(path, "{command}{:.1},{:.1} ", x_at(*x), y_at(*y));
                    drawing = true;
                }
                None => drawing = false,
            }
        }
        let dash = line.dash_attribute();
        let _ = writeln!(
            svg,
            r#"<path d="{}" fill="none" stroke="{}" stroke-width="{}" stroke-linejoin="round"{dash}><title>{}</title></path>"#,
            path.trim_end(),
            line.color,
            line.width,
            escape(line.label)
        );
        if line.dash.is_some() {
            // A dashed line is drawn over others; its markers would hide theirs.
            continue;
        }
        // Markers show where the block sizes planned are; hovering one tells its numbers.
        let _ = writeln!(svg, r#"<g fill="{}">"#, line.color);
        for (x, y, tip) in line.points.iter().flatten() {
            let _ = writeln!(
                svg,
                r#"<circle cx="{:.1}" cy="{:.1}" r="{:.1}"><title>{}</title></circle>"#,
                x_at(*x),
                y_at(*y),
                line.width * 0.5 + 1.5,
                escape(tip)
            );
        }
        let _ = writeln!(svg, "</g>");
    }
    svg.push_str("</svg>\n");
    svg
}

/// The legend: a sample of each line and its label, in a row centred on `middle`.
fn legend(svg: &mut String, lines: &[Line], middle: f64, y: f64) {
    // Labels are measured at about 7.5 px a character, enough for a 13 px sans-serif font.
    let widths: Vec<f64> = lines
        .iter()
        .map(|line| 36.0 + 8.0 + 7.5 * line.label.chars().count() as f64)
        .collect();
    let gap = 28.0;
    let total = widths.iter().sum::<f64>() + gap * (widths.len().saturating_sub(1)) as f64;
    let mut x = middle - total / 2.0;
    for (line, width) in lines.iter().zip(&widths) {
        let dash = line.dash_attribute();
        let _ = writeln!(
            svg,
            r#"<line x1="{x:.1}" y1="{y}" x2="{:.1}" y2="{y}" stroke="{}" stroke-width="{}"{dash}/><text x="{:.1}" y="{}">{}</text>"#,
            x + 36.0,
            line.color,
            line.width,
            x + 44.0,
            y + 4.5,
            escape(line.label)
        );
        x += width + gap;
    }
}

/// A round step (1, 2 or 5 times a power of ten, at least 1) that cuts `span` into 5 to 13 parts:
/// the round step nearest (by ratio) to an eighth of it.
fn tick_step(span: f64) -> f64 {
    let rough = span / 8.0;
    let power = 10f64.powf(rough.log10().floor());
    // The thresholds are the geometric means of neighbouring steps: sqrt(2), sqrt(10), sqrt(50).
    let step = match rough / power {
        r if r < 1.414 => power,
        r if r < 3.162 => 2.0 * power,
        r if r < 7.071 => 5.0 * power,
        _ => 10.0 * power,
    };
    step.max(1.0)
}

/// `text` with the characters XML gives a meaning escaped.
fn escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            '\'' => escaped.push_str("&apos;"),
            c => escaped.push(c),
        }
    }
    escaped
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_few() {
        assert_eq!(tick_step(270.0), 50.0);
        assert_eq!(tick_step(3.0), 1.0);
        assert_eq!(tick_step(16_777_215.0), 2_000_000.0);
        assert_eq!(tick_step(1000.0), 100.0);
        assert_eq!(tick_step(58_000.0), 10_000.0);
        for span in 1..3000 {
            let parts = f64::from(span) / tick_step(f64::from(span));
            assert!(
                span < 40 || (5.0..=13.0).contains(&parts),
                "{span}: {parts}"
            );
        }
    }

    #[test]
    fn text_is_escaped_and_gaps_break_the_path() {
        let chart = Chart {
            title: "a <b> & \"c\"",
            subtitle: "",
            x_label: "x",
            y_label: "y",
            x_range: (0.0, 10.0),
            lines: vec![Line {
                label: "l",
                color: "red",
                width: 2.0,
                dash: None,
                points: vec![
                    Some((0.0, 50.0, "one".into())),
                    Some((1.0, 40.0, "two".into())),
                    None,
                    Some((9.0, 0.0, "three".into())),
                ],
            }],
            shade: None,
        };
        let svg = render(&chart);
        assert!(svg.contains("a &lt;b&gt; &amp; &quot;c&quot;"));
        assert!(
            svg.contains(r#"d="M72.0,256.0 L138.4,288.0 M669.6,416.0""#),
            "{svg}"
        );
        assert_eq!(svg.matches("<circle").count(), 3);
    }
}
