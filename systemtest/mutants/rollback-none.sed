# file: realize/allocate.go
# guard: a failed multi-device Allocate rolls back what it created (mutant: it destroys nothing)
s/^\t\tif d\.Origin == OriginCreated {$/\t\tif false \&\& d.Origin == OriginCreated {/
