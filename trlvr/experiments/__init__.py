"""The experiment layer: checkpoint selection on held-out data, seed groups, training curves,
and the summaries that put several runs side by side. Built on `trlvr.training` and `trlvr.eval`."""
