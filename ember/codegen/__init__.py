"""Code generation: loop IR to source text, one renderer per language."""

from ember.codegen.c import CRenderer, render_c
from ember.codegen.renderer import Renderer, output_args, written_buffers

__all__ = ["CRenderer", "Renderer", "output_args", "render_c", "written_buffers"]
