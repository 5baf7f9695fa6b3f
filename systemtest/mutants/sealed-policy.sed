# file: systemtest/sealed_test.go
# guard: the record's admission policy (issue 35; modelled by sealRecords, mutant: the policy lets every write through)
s/^\t\tif !\*sealed || a\.GetSubresource() != "" {$/\t\tif true || a.GetSubresource() != "" {/
