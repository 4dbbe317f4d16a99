//! PTX as tokens, exact to the byte: what the splice renames and moves. Names, registers,
//! labels and opcodes are identifiers; directives and opcode suffixes (`.param`, `.b32`) are
//! directives, never names; hex floats and versions are one number.

use std::ops::Range;

/// Why a text is not PTX that can be lexed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LexError {
    /// 1-based.
    pub line: usize,
    pub problem: &'static str,
}

pub fn is_ident_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'$'
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokKind {
    /// `[a-zA-Z][a-zA-Z0-9_$]*` or `[_$%][a-zA-Z0-9_$]+`: names, registers, labels, opcodes.
    Ident,
    /// `.` followed by identifier characters: directives, and the suffixes of opcodes
    /// (`ld.param.b32` is `ld`, `.param`, `.b32`), which must never be taken for names.
    Directive,
    Number,
    Str,
    Punct(u8),
}

#[derive(Clone, Copy, Debug)]
pub struct Token {
    pub kind: TokKind,
    pub start: usize,
    pub end: usize,
    /// 1-based.
    pub line: usize,
}

impl Token {
    pub fn range(&self) -> Range<usize> {
        self.start..self.end
    }
}

/// The tokens of a PTX text; comments and whitespace are left out.
pub fn lex(text: &str) -> Result<Vec<Token>, LexError> {
    let malformed = |line: usize, problem: &'static str| LexError { line, problem };
    let b = text.as_bytes();
    let mut toks = Vec::new();
    let (mut i, mut line) = (0, 1);
    while let Some(&c) = b.get(i) {
        let next = b.get(i + 1).copied().unwrap_or(0);
        let start = i;
        let kind = match c {
            b'\n' => {
                line += 1;
                i += 1;
                continue;
            }
            _ if c.is_ascii_whitespace() || c == 0x0b => {
                i += 1;
                continue;
            }
            b'/' if next == b'/' => {
                while b.get(i).is_some_and(|&c| c != b'\n') {
                    i += 1;
                }
                continue;
            }
            b'/' if next == b'*' => {
                let Some(len) = text[i + 2..].find("*/") else {
                    return Err(malformed(line, "unterminated `/*` comment"));
                };
                line += b[i..i + 2 + len].iter().filter(|&&c| c == b'\n').count();
                i += len + 4;
                continue;
            }
            b'"' => {
                i += 1;
                loop {
                    match b.get(i) {
                        None | Some(b'\n') => return Err(malformed(line, "unterminated string")),
                        Some(b'"') => break,
                        Some(b'\\') => i += 2,
                        Some(_) => i += 1,
                    }
                }
                i += 1;
                TokKind::Str
            }
            b'.' if is_ident_char(next) => {
                i += 1;
                while b.get(i).copied().is_some_and(is_ident_char) {
                    i += 1;
                }
                TokKind::Directive
            }
            _ if c.is_ascii_alphabetic()
                || (matches!(c, b'_' | b'$' | b'%') && is_ident_char(next)) =>
            {
                i += 1;
                while b.get(i).copied().is_some_and(is_ident_char) {
                    i += 1;
                }
                TokKind::Ident
            }
            _ if c.is_ascii_digit() => {
                // Hex floats (`0f3F800000`) and versions (`8.8`) are one token, so that their
                // letters are never read as names.
                while b
                    .get(i)
                    .is_some_and(|&c| c.is_ascii_alphanumeric() || c == b'_' || c == b'.')
                {
                    i += 1;
                }
                TokKind::Number
            }
            _ if c.is_ascii() => {
                i += 1;
                TokKind::Punct(c)
            }
            _ => {
                return Err(malformed(
                    line,
                    "a non-ASCII character outside comments and strings",
                ))
            }
        };
        toks.push(Token {
            kind,
            start,
            end: i,
            line,
        });
    }
    Ok(toks)
}
