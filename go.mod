module github.com/fusednorm/fusednorm

go 1.26
