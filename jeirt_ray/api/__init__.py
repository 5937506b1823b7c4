"""The public API: `space` (`Space`, `Registry`: what a Python user holds) and `jobs` (load,
import, train, evaluate, register, the demo and the report, as plain functions). `import
jeirt_ray as jr` exports their names."""
