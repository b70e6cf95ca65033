//! A PNG reader for the screenshots the tests take (8-bit RGB or RGBA, not interlaced: what
//! Chromium writes), inflating with `flate2`: enough to count a picture's colours.

use std::io::Read;

/// A decoded picture: width, height, and each pixel's red, green and blue.
pub struct Picture {
    pub width: usize,
    pub height: usize,
    pub rgb: Vec<[u8; 3]>,
}

impl Picture {
    /// The pixel at column `x`, row `y`.
    pub fn at(&self, x: usize, y: usize) -> [u8; 3] {
        self.rgb[y * self.width + x]
    }

    /// How many pixels are `colour` (`#rrggbb`), each channel within 2.
    pub fn count(&self, colour: &str) -> usize {
        let want = rgb(colour);
        self.rgb.iter().filter(|p| p.iter().zip(want).all(|(a, b)| a.abs_diff(b) <= 2)).count()
    }
}

/// `#rrggbb` as three bytes.
pub fn rgb(colour: &str) -> [u8; 3] {
    let hex = colour.trim_start_matches('#');
    let byte = |i: usize| u8::from_str_radix(&hex[i..i + 2], 16).expect("a #rrggbb colour");
    [byte(0), byte(2), byte(4)]
}

/// Decodes `data`; panics on what it does not read (another bit depth, a palette, interlacing).
pub fn decode(data: &[u8]) -> Picture {
    assert_eq!(&data[..8], b"\x89PNG\r\n\x1a\n", "a PNG signature");
    let (mut width, mut height, mut channels) = (0, 0, 0);
    let mut idat = Vec::new();
    let mut at = 8;
    while at + 8 <= data.len() {
        let len = u32::from_be_bytes(data[at..at + 4].try_into().unwrap()) as usize;
        let kind = &data[at + 4..at + 8];
        let body = &data[at + 8..at + 8 + len];
        match kind {
            b"IHDR" => {
                width = u32::from_be_bytes(body[0..4].try_into().unwrap()) as usize;
                height = u32::from_be_bytes(body[4..8].try_into().unwrap()) as usize;
                assert_eq!(body[8], 8, "8 bits a channel");
                channels = match body[9] {
                    2 => 3,
                    6 => 4,
                    t => panic!("colour type {t}"),
                };
                assert_eq!(body[12], 0, "not interlaced");
            }
            b"IDAT" => idat.extend_from_slice(body),
            b"IEND" => break,
            _ => {}
        }
        at += 12 + len;
    }
    let mut raw = Vec::new();
    flate2::read::ZlibDecoder::new(&idat[..]).read_to_end(&mut raw).expect("the image data inflates");
    let stride = width * channels;
    assert_eq!(raw.len(), height * (stride + 1), "one filter byte and a row per line");
    let mut rows: Vec<Vec<u8>> = Vec::with_capacity(height);
    for y in 0..height {
        let line = &raw[y * (stride + 1)..(y + 1) * (stride + 1)];
        let (filter, src) = (line[0], &line[1..]);
        let mut row = vec![0u8; stride];
        for i in 0..stride {
            let a = if i >= channels { row[i - channels] } else { 0 };
            let b = if y > 0 { rows[y - 1][i] } else { 0 };
            let c = if y > 0 && i >= channels { rows[y - 1][i - channels] } else { 0 };
            let predicted = match filter {
                0 => 0,
                1 => a,
                2 => b,
                3 => ((u16::from(a) + u16::from(b)) / 2) as u8,
                4 => {
                    let p = i16::from(a) + i16::from(b) - i16::from(c);
                    let (pa, pb, pc) = ((p - i16::from(a)).abs(), (p - i16::from(b)).abs(), (p - i16::from(c)).abs());
                    if pa <= pb && pa <= pc {
                        a
                    } else if pb <= pc {
                        b
                    } else {
                        c
                    }
                }
                f => panic!("filter {f}"),
            };
            row[i] = src[i].wrapping_add(predicted);
        }
        rows.push(row);
    }
    let rgb = rows.iter().flat_map(|r| r.chunks_exact(channels).map(|p| [p[0], p[1], p[2]])).collect();
    Picture { width, height, rgb }
}
