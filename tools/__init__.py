"""Developer tools run from the repository root (`python -m tools.NAME`); not part of the `sim`
package: they may import `sim`, `sim` never imports them."""
