"""The batch augmentation ops behind `loaders.transforms` (import them from there)."""
