# file: deviceplugin/record.go
# guard: a maintenance pass records no device an Allocate created before its hand-out (mutant: it does, and a rolled-back device leaves its container handed)
s/^\t\tif !ok \&\& in\.Origin == realize\.OriginCreated {$/\t\tif false \&\& !ok \&\& in.Origin == realize.OriginCreated {/
