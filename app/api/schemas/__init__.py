"""The API's request and response models, one module per resource: the OpenAPI spec is generated
from them."""
