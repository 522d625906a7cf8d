//! Operations on the read-only catalogs: GPU stock and specs, regions, OS images.

use super::CloudClient;
use crate::error::Error;
use crate::model::{GpuSpecList, GpuStockList, OsImageList, RegionList};
use crate::routes::Operation;

impl CloudClient {
    pub async fn get_gpu_stock(&self) -> Result<GpuStockList, Error> {
        self.fetch(Operation::GetGpuStock, &[]).await
    }

    pub async fn get_gpu_specs(&self) -> Result<GpuSpecList, Error> {
        self.fetch(Operation::GetGpuSpecs, &[]).await
    }

    pub async fn list_regions(&self) -> Result<RegionList, Error> {
        self.fetch(Operation::ListRegions, &[]).await
    }

    pub async fn list_os_images(&self) -> Result<OsImageList, Error> {
        self.fetch(Operation::ListOsImages, &[]).await
    }
}
