//! Plain-text tables for the offline commands: a header row, columns padded to their widest
//! cell, numbers right-aligned, long names cut with `…` so one row stays one line.

use std::io::{self, Write};

use crate::figures::one_line;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

#[derive(Clone, Copy, Debug)]
pub struct Column {
    pub header: &'static str,
    pub align: Align,
    /// Cells longer than this many characters are cut (the header is never cut).
    pub max: usize,
}

impl Column {
    pub const fn left(header: &'static str) -> Column {
        Column {
            header,
            align: Align::Left,
            max: 48,
        }
    }

    pub const fn right(header: &'static str) -> Column {
        Column {
            header,
            align: Align::Right,
            max: 48,
        }
    }
}

pub struct Table {
    columns: Vec<Column>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(columns: &[Column]) -> Table {
        Table {
            columns: columns.to_vec(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        debug_assert_eq!(cells.len(), self.columns.len(), "one cell per column");
        let cells = cells
            .into_iter()
            .zip(&self.columns)
            .map(|(cell, column)| cut(one_line(cell), column.max))
            .collect();
        self.rows.push(cells);
    }

    /// Writes the header and the rows, each line starting with `indent`.
    pub fn write(&self, out: &mut impl Write, indent: &str) -> io::Result<()> {
        let widths: Vec<usize> = self
            .columns
            .iter()
            .enumerate()
            .map(|(i, c)| {
                self.rows
                    .iter()
                    .map(|r| width(&r[i]))
                    .chain([width(c.header)])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let header: Vec<&str> = self.columns.iter().map(|c| c.header).collect();
        self.line(out, indent, &widths, &header)?;
        for row in &self.rows {
            let cells: Vec<&str> = row.iter().map(String::as_str).collect();
            self.line(out, indent, &widths, &cells)?;
        }
        Ok(())
    }

    fn line(
        &self,
        out: &mut impl Write,
        indent: &str,
        widths: &[usize],
        cells: &[&str],
    ) -> io::Result<()> {
        let mut line = String::from(indent);
        for (i, ((cell, column), &w)) in cells.iter().zip(&self.columns).zip(widths).enumerate() {
            if i > 0 {
                line.push_str("  ");
            }
            let pad = " ".repeat(w - width(cell));
            match column.align {
                Align::Left => {
                    line.push_str(cell);
                    line.push_str(&pad);
                }
                Align::Right => {
                    line.push_str(&pad);
                    line.push_str(cell);
                }
            }
        }
        writeln!(out, "{}", line.trim_end())
    }
}

fn width(s: &str) -> usize {
    s.chars().count()
}

fn cut(cell: String, max: usize) -> String {
    if width(&cell) <= max {
        return cell;
    }
    let mut cut: String = cell.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cell_with_newlines_stays_on_its_row() {
        let mut t = Table::new(&[Column::right("PID"), Column::left("COMMAND")]);
        t.row(vec![
            "7".into(),
            "python3 -c \nimport time\n\ttime.sleep(9)".into(),
        ]);
        let mut out = Vec::new();
        t.write(&mut out, "").unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "PID  COMMAND\n\
            \x20 7  python3 -c  import time  time.sleep(9)\n"
        );
    }

    #[test]
    fn columns_line_up_and_long_cells_are_cut() {
        let mut t = Table::new(&[
            Column::right("TID"),
            Column {
                max: 6,
                ..Column::left("NAME")
            },
            Column::right("TOTAL"),
        ]);
        t.row(vec!["1".into(), "main".into(), "264 B".into()]);
        t.row(vec![
            "12345".into(),
            "worker-pool-7".into(),
            "1.4 MiB".into(),
        ]);
        let mut out = Vec::new();
        t.write(&mut out, "  ").unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "    TID  NAME      TOTAL\n\
            \x20     1  main      264 B\n\
            \x20 12345  worke…  1.4 MiB\n"
        );
    }
}
