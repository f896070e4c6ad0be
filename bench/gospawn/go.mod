module gospawn

go 1.21
