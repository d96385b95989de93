/**
 * The CLI's HTTP client: the API's one client (http/api-client.ts), typed from the route map.
 * Every non-2xx answer becomes an ApiError carrying the API's stable code and message, which the
 * CLI prints and turns into a non-zero exit (an API that cannot be reached: status 0, exit 3).
 */
export { ApiClient, ApiError, type AnswerOf, type RouteKey } from '../http/api-client.ts';
