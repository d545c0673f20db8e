//! One file per scenario of `SCENARIOS.md`; each exports `run`.

pub(crate) mod s01;
pub(crate) mod s02;
pub(crate) mod s03;
pub(crate) mod s04;
pub(crate) mod s05;
pub(crate) mod s06;
pub(crate) mod s07;
pub(crate) mod s08;
pub(crate) mod s09;
pub(crate) mod s10;
pub(crate) mod s11;
pub(crate) mod s12;
pub(crate) mod s13;
pub(crate) mod s14;
