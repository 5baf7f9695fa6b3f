# file: realize/allocate.go
# guard: rollback of a failed multi-device Allocate destroys only what it created (mutant: what it adopted too)
s/^\t\tif d\.Origin == OriginCreated {$/\t\tif d.Origin == OriginCreated || d.Origin == OriginAdopted {/
