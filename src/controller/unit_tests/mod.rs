//! Unit tests that span several modules, compiled only for the crate's own tests: the heap
//! held per watched object (`heap_figures`) and property tests of the spec-to-request
//! mapping (`mapping_props`).

mod heap_figures;
mod mapping_props;
