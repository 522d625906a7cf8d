//! Operations on the read-only catalogs: GPU stock and specs, regions, OS images.

use crate::model::{GpuSpecList, GpuStockList, OsImageList, RegionList};

calls! {
    fn get_gpu_stock() -> GpuStockList = fetch(GetGpuStock, []);
    fn get_gpu_specs() -> GpuSpecList = fetch(GetGpuSpecs, []);
    fn list_regions() -> RegionList = fetch(ListRegions, []);
    fn list_os_images() -> OsImageList = fetch(ListOsImages, []);
}
