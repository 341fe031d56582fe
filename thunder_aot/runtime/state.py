"""A module standing in front of another with the other's state: its submodules, parameters and
buffers under the same names (the generated module's CUDA graphs, the transformers adapters)."""

from __future__ import annotations

import torch


def adopt_state(wrapper: torch.nn.Module, module: torch.nn.Module) -> None:
    """Give ``wrapper`` the submodules, parameters and buffers of ``module`` under the same names (not
    copies), so that its ``state_dict`` is ``module``'s: for a module standing in front of another."""
    for name, child in module.named_children():
        wrapper.add_module(name, child)
    for name, parameter in module.named_parameters(recurse=False):
        wrapper.register_parameter(name, parameter)
    for name, buffer in module.named_buffers(recurse=False):
        wrapper.register_buffer(name, buffer, persistent=name not in module._non_persistent_buffers_set)
