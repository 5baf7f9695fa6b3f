# file: deviceplugin/record.go
# guard: the checkpoint's recorded hand-outs are loaded at start (mutant: a restarted plugin forgets them)
s/^\tfor _, d := range c\.Devices {$/\tfor _, d := range c.Devices[:0] {/
