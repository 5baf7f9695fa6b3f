# file: deviceplugin/plugin.go
# guard: an intact checkpoint is read at start (mutant: treated as lost)
s/^\tckpt, exists, err := ReadCheckpoint(cfg\.Checkpoint)$/\tckpt, exists, err := ReadCheckpoint(cfg.Checkpoint)\n\tckpt, exists = Checkpoint{}, false/
