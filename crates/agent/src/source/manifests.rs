pub struct Loaded;
pub fn load() {}
pub fn watch() {}
