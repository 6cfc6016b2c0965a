// A stand-in for the Tencent Cloud VPC SDK module, which the Go module proxy
// does not serve: see ../../go.mod. Not the SDK; no code of it.
module github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/vpc

go 1.21
