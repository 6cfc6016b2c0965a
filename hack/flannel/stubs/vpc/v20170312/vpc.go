// Package v20170312 stands in for the Tencent Cloud VPC API client that
// flannel's tencentvpc backend (pkg/backend/tencentvpc) calls, so that
// flannel's main package, which imports every backend, builds without the
// SDK module the Go module proxy refuses. It declares only the names that
// backend uses; every call fails with ErrUnavailable, so a flannel network
// configured with the "tencent-vpc" backend fails at start while every other
// backend is flannel's own. See hack/flannel/go.mod.
package v20170312

import "errors"

// ErrUnavailable is what every Client call returns.
var ErrUnavailable = errors.New("the tencent-vpc backend is not part of this flanneld build (hack/flannel)")

// Client stands for the VPC API client.
type Client struct{}

// NewClientWithSecretId returns a Client whose calls all fail.
func NewClientWithSecretId(secretID, secretKey, region string) (*Client, error) {
	return &Client{}, nil
}

// Filter is a name and the values it matches.
type Filter struct {
	Name   *string
	Values []*string
}

// Route is one route of a route table.
type Route struct {
	DestinationCidrBlock *string
	GatewayType          *string
	GatewayId            *string
	RouteId              *uint64
	RouteType            *string
	Enabled              *bool
}

// RouteTable is a route table and its routes.
type RouteTable struct {
	RouteTableId *string
	RouteSet     []*Route
}

// DescribeRouteTablesRequest asks for the route tables Filters match.
type DescribeRouteTablesRequest struct {
	Filters []*Filter
}

// NewDescribeRouteTablesRequest returns an empty request.
func NewDescribeRouteTablesRequest() *DescribeRouteTablesRequest {
	return &DescribeRouteTablesRequest{}
}

// DescribeRouteTablesResponse holds the route tables found.
type DescribeRouteTablesResponse struct {
	Response *struct {
		RouteTableSet []*RouteTable
	}
}

// DescribeRouteTables fails.
func (c *Client) DescribeRouteTables(*DescribeRouteTablesRequest) (*DescribeRouteTablesResponse, error) {
	return nil, ErrUnavailable
}

// RoutesRequest names routes of a route table.
type RoutesRequest struct {
	RouteTableId *string
	Routes       []*Route
}

// DeleteRoutesRequest asks to delete Routes.
type DeleteRoutesRequest = RoutesRequest

// CreateRoutesRequest asks to create Routes.
type CreateRoutesRequest = RoutesRequest

// NewDeleteRoutesRequest returns an empty request.
func NewDeleteRoutesRequest() *DeleteRoutesRequest { return &RoutesRequest{} }

// NewCreateRoutesRequest returns an empty request.
func NewCreateRoutesRequest() *CreateRoutesRequest { return &RoutesRequest{} }

// RoutesResponse answers a DeleteRoutesRequest or a CreateRoutesRequest.
type RoutesResponse struct{}

// DeleteRoutes fails.
func (c *Client) DeleteRoutes(*DeleteRoutesRequest) (*RoutesResponse, error) {
	return nil, ErrUnavailable
}

// CreateRoutes fails.
func (c *Client) CreateRoutes(*CreateRoutesRequest) (*RoutesResponse, error) {
	return nil, ErrUnavailable
}
