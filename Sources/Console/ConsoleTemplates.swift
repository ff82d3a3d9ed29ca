import Mustache

/// The console's pages: Mustache templates, so every value is HTML-escaped unless a template says otherwise
/// (only `{{{body}}}` of the layout does, and the body is a page this library rendered). No script anywhere: every
/// page and action is a link or a form.
enum ConsoleTemplates {
    static let library: MustacheLibrary = {
        var library = MustacheLibrary()
        for (name, text) in templates {
            // The templates are constants of this file: one that does not parse is a bug found by the first test.
            try! library.register(text, named: name)
        }
        return library
    }()

    static func render(_ name: String, _ values: [String: Any]) -> String {
        library.render(values, withTemplate: name) ?? ""
    }

    static let templates: [String: String] = [
        "layout": """
            <!doctype html>
            <html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
            <title>{{title}} · pipeline console</title><link rel="stylesheet" href="/static/console.css"></head>
            <body>
            {{#operator}}<header><a class="brand" href="/">pipeline console</a>
            <form class="search" method="get" action="/search"><input name="q" type="search" placeholder="customer, transaction, notification, order or event id" aria-label="search" value="{{query}}"><button>Find</button></form>
            <nav><a href="/dead-letters">Dead letters</a> <a href="/audit">Audit</a>
            <form class="inline" method="post" action="/logout"><input type="hidden" name="csrf" value="{{csrf}}"><button class="link">Sign out {{email}} ({{role}})</button></form></nav></header>{{/operator}}
            <main>{{{body}}}</main></body></html>
            """,
        "login": """
            <h1>Sign in</h1>
            {{#error}}<p class="error" role="alert">{{error}}</p>{{/error}}
            <form method="post" action="/login" class="card">
            <label>Email <input name="email" type="email" autocomplete="username" required value="{{email}}"></label>
            <label>Password <input name="password" type="password" autocomplete="current-password" required></label>
            <input type="hidden" name="next" value="{{next}}">
            <button>Sign in</button></form>
            """,
        "home": """
            <h1>Find a customer</h1>
            <p>Search by appAccountToken or customer id, originalTransactionId, transactionId, notificationUUID, order id
            (webOrderLineItemId) or an event id. Dead letters and the audit are linked above.</p>
            """,
        "search": """
            <h1>Search: {{query}}</h1>
            {{^matches}}<p class="empty">Nothing matches.</p>{{/matches}}
            <ul class="matches">{{#matches}}<li><a href="{{path}}">{{label}}</a> <span class="kind">{{kind}}</span></li>{{/matches}}</ul>
            """,
        "subscription": """
            <h1>Subscription {{id}} <small>{{bundle}}</small></h1>
            {{#acted}}<p class="notice" role="status">{{acted}}</p>{{/acted}}
            <section><h2>Entitlement now</h2>
            {{^entitlements}}<p class="empty">No entitlement row.</p>{{/entitlements}}
            <table><thead><tr><th>Environment</th><th>Status</th><th>Access</th><th>Product</th><th>Expires</th><th>Renewal</th><th>Grace until</th><th>Owner</th><th>Last notification</th></tr></thead><tbody>
            {{#entitlements}}<tr data-environment="{{environment}}" data-status="{{status}}"><td>{{environment}}</td><td>{{status}}{{#contradiction}} <span class="warn">contradicted: {{contradiction}}</span>{{/contradiction}}</td><td>{{#isActive}}granted{{/isActive}}{{^isActive}}none{{/isActive}}</td><td>{{productId}}</td><td>{{expiresAt}}</td><td>{{autoRenewStatus}} {{autoRenewProductId}}</td><td>{{gracePeriodExpiresAt}}</td><td>{{#owner}}<a href="{{ownerPath}}">{{owner}}</a>{{/owner}}{{^owner}}{{appAccountToken}}{{/owner}}</td><td>{{lastNotificationType}} {{lastSignedDate}}</td></tr>{{/entitlements}}
            </tbody></table></section>
            <section><h2>Transactions</h2><table><thead><tr><th>Transaction</th><th>Environment</th><th>Product</th><th>Purchased</th><th>Expires</th><th>Revoked</th><th>Price</th></tr></thead><tbody>
            {{#transactions}}<tr><td>{{transactionId}}</td><td>{{environment}}</td><td>{{productId}}</td><td>{{purchaseDate}}</td><td>{{expiresDate}}</td><td>{{revocationDate}}</td><td>{{price}} {{currency}}</td></tr>{{/transactions}}
            </tbody></table></section>
            {{#mayAct}}<section><h2>Actions</h2>
            <form method="post" action="{{actionPath}}" class="card"><input type="hidden" name="csrf" value="{{csrf}}">
            <label>Reason (required, recorded in the audit) <input name="reason" required maxlength="500"></label>
            <button name="action" value="reconcile">Reconcile with Apple now</button>
            {{#hasEndpoints}}<label>Webhook endpoint <select name="endpoint">{{#endpoints}}<option value="{{id}}">{{id}} {{url}}</option>{{/endpoints}}</select></label>
            <button name="action" value="resend-webhooks">Re-send this subscription's events to the endpoint</button>{{/hasEndpoints}}
            </form></section>{{/mayAct}}
            {{> timeline}}
            """,
        "customer": """
            <h1>Customer {{customerId}} <small>{{bundle}}</small></h1>
            <section><h2>Subscriptions</h2>{{^subscriptions}}<p class="empty">No subscription of this customer.</p>{{/subscriptions}}
            <ul>{{#subscriptions}}<li><a href="{{path}}">{{id}}</a></li>{{/subscriptions}}</ul></section>
            <section><h2>Offers</h2>{{^hasOffers}}<p class="empty">No offer signed for this customer.</p>{{/hasOffers}}
            {{#hasOffers}}<table class="offers"><thead><tr><th>issued (UTC)</th><th>kind</th><th>product</th><th>offer</th><th>decided by</th><th>redeemed by</th></tr></thead><tbody>
            {{#offers}}<tr class="offer" data-nonce="{{nonce}}" data-redeemed="{{redeemed}}"><td>{{issuedAt}}</td><td>{{kind}}</td><td>{{productId}}</td><td>{{offer}}</td><td>{{rule}}</td><td>{{#redeemed}}{{redeemedTransactionId}} ({{redeemedAt}}){{/redeemed}}{{^redeemed}}not redeemed{{/redeemed}}</td></tr>{{/offers}}
            </tbody></table>{{/hasOffers}}</section>
            {{#mayErase}}<section><h2>Erase this customer</h2>
            <form method="post" action="{{erasePath}}" class="card danger" id="erase"><input type="hidden" name="csrf" value="{{csrf}}">
            <p>Deletes everything the pipeline keeps about this customer (subscriptions, transactions, archived notifications, events,
            webhook deliveries, dead letters) and keeps them erased through replays; backends get <code>customer.erased</code>. It cannot be undone.</p>
            <label>Reason (required, kept with the erasure; no personal data) <input name="reason" required maxlength="200"></label>
            <label>Type the customer id to confirm <input name="confirm" required autocomplete="off"></label>
            <button name="action" value="erase">Erase the customer</button>
            </form></section>{{/mayErase}}
            {{> timeline}}
            """,
        "timeline": """
            <section><h2>Timeline <small>newest first</small></h2>
            <ol class="timeline">
            {{#rows}}
            {{#isNotification}}<li class="row {{outcomeClass}}" data-kind="{{kind}}" data-notification-uuid="{{uuid}}" data-outcome="{{outcome}}" data-deliveries="{{deliveries}}"{{#traceId}} data-trace-id="{{traceId}}"{{/traceId}}>
            <span class="what">{{kind}} {{type}}{{#subtype}} / {{subtype}}{{/subtype}}</span> <span class="outcome">{{outcome}}{{#code}}: {{code}}{{/code}}</span>
            <span class="times">signed {{signedDate}} · received {{firstReceived}}{{#repeated}} … {{lastReceived}}{{/repeated}} · {{deliveries}} deliver{{#plural}}ies{{/plural}}{{^plural}}y{{/plural}}</span>
            {{#reason}}<span class="reason">{{reason}}</span>{{/reason}}
            {{#traceId}}<span class="trace">trace {{#traceURL}}<a href="{{traceURL}}" rel="noreferrer">{{traceId}}</a>{{/traceURL}}{{^traceURL}}<code>{{traceId}}</code>{{/traceURL}}</span>{{/traceId}}
            <span class="ids">{{#uuid}}{{#detailPath}}<a href="{{detailPath}}">{{uuid}}</a>{{/detailPath}}{{^detailPath}}{{uuid}}{{/detailPath}}{{/uuid}} · subscription {{subscription}}{{#source}} · {{source}}{{/source}}</span></li>{{/isNotification}}
            {{#isEvent}}<li class="row event" data-kind="event" data-event-id="{{eventId}}" data-sequence="{{sequence}}">
            <span class="what">event {{type}} #{{sequence}}</span> {{#offerIdentifier}}<span class="offer" data-nonce="{{offerNonce}}">offer {{offerIdentifier}} redeemed by {{offerTransaction}} (nonce {{offerNonce}})</span>{{/offerIdentifier}}{{^offerIdentifier}}<span class="outcome">{{before}} → {{after}}</span>{{/offerIdentifier}} <span class="times">{{time}}{{^published}} · not yet published{{/published}}</span>
            <span class="ids">{{eventId}} · subscription {{subscription}}</span>
            {{#webhooks}}<span class="webhook">webhook {{endpoint}}: {{status}}, {{attempts}} attempt(s){{#lastStatus}}, last HTTP {{lastStatus}}{{/lastStatus}}{{#lastError}}, {{lastError}}{{/lastError}}</span>{{/webhooks}}</li>{{/isEvent}}
            {{#isAction}}<li class="row action" data-kind="action"><span class="what">action {{action}}</span> <span class="times">{{time}} by {{operator}}</span> <span class="reason">{{reason}}</span> <span class="ids">{{detail}}</span></li>{{/isAction}}
            {{/rows}}
            </ol>
            {{^rows}}<p class="empty">Nothing happened to these subscriptions yet.</p>{{/rows}}
            {{#nextPath}}<p><a class="more" href="{{nextPath}}">Older</a></p>{{/nextPath}}
            </section>
            """,
        "erased": """
            <h1>Customer erased <small>{{bundle}}</small></h1>
            <section class="card"><p class="acted">Erasure <code data-request-id="{{requestId}}">{{requestId}}</code> completed: {{counts}}.</p>
            <p>Backends that receive events get <code>customer.erased</code> with this request id. <code>pipelinectl customers erasure --request-id {{requestId}}</code> shows it again.</p></section>
            """,
        "notification": """
            <h1>Notification {{uuid}}</h1>
            <p>{{type}}{{#subtype}} / {{subtype}}{{/subtype}} · signed {{signedDate}} · {{environment}} · {{bundleId}} · outcome <strong>{{outcome}}</strong>
            {{#subscriptionPath}} · <a href="{{subscriptionPath}}">subscription {{subscription}}</a>{{/subscriptionPath}}</p>
            <section><h2>Verification</h2><p>Verified when stored (outer JWS and every nested JWS) against the configured roots, at signedDate.</p>
            <table><thead><tr><th>Certificate</th><th>Subject</th><th>Valid from</th><th>Valid until</th><th>At signedDate</th></tr></thead><tbody>
            {{#chain}}<tr><td>{{position}}</td><td>{{subject}}</td><td>{{notBefore}}</td><td>{{notAfter}}</td><td>{{verdict}}</td></tr>{{/chain}}
            </tbody></table></section>
            <section><h2>Deliveries</h2><ul>{{#deliveries}}<li>{{position}} · {{source}} · {{receivedAt}}</li>{{/deliveries}}</ul></section>
            <section><h2>Payload</h2><pre>{{payload}}</pre></section>
            {{#nested}}<section><h2>{{name}}</h2><pre>{{json}}</pre></section>{{/nested}}
            """,
        "deadLetters": """
            <h1>Dead letters</h1>
            {{#acted}}<p class="notice" role="status">{{acted}}</p>{{/acted}}
            <form method="get" action="/dead-letters" class="filters">
            <label>Reason code <input name="code" value="{{code}}"></label> <label>App <input name="app" value="{{app}}"></label>
            <label>Since <input name="since" type="date" value="{{since}}"></label> <label>Identifier <input name="q" value="{{q}}"></label> <button>Filter</button></form>
            <p>{{#codes}}<a href="/dead-letters?code={{code}}">{{code}}</a> ({{count}}) {{/codes}}</p>
            <form method="post" action="/dead-letters/redrive"><input type="hidden" name="csrf" value="{{csrf}}">
            <table><thead><tr><th></th><th>When</th><th>Code</th><th>Reason</th><th>Claims (unverified)</th><th>Payload (decoded, unverified; then as received)</th></tr></thead><tbody>
            {{#rows}}<tr class="dead-letter" data-position="{{position}}" data-code="{{code}}"><td><input type="checkbox" name="position" value="{{position}}" aria-label="select {{position}}"></td>
            <td>{{time}}</td><td>{{code}}</td><td>{{reason}}</td><td>{{uuid}} {{type}} {{bundle}} {{subscription}}</td><td>{{#decoded}}<pre class="payload">{{decoded}}</pre>{{/decoded}}<pre class="payload">{{payload}}</pre></td></tr>{{/rows}}
            </tbody></table>
            {{^rows}}<p class="empty">No dead letters match.</p>{{/rows}}
            {{#mayAct}}<label>Reason (required, recorded in the audit) <input name="reason" required maxlength="500"></label> <button>Re-drive selected</button>{{/mayAct}}
            </form>
            """,
        "audit": """
            <h1>Audit</h1>
            <table><thead><tr><th>When</th><th>Operator</th><th>Action</th><th>Reason</th><th>Subject</th><th>Detail</th></tr></thead><tbody>
            {{#rows}}<tr class="audit" data-action="{{action}}"><td>{{at}}</td><td>{{operator_email}}</td><td>{{action}}</td><td>{{reason}}</td><td>{{bundle_id}} {{original_transaction_id}} {{customer_id}}</td><td>{{detail}}</td></tr>{{/rows}}
            </tbody></table>
            {{#nextPath}}<p><a class="more" href="{{nextPath}}">Older</a></p>{{/nextPath}}
            """,
        "error": """
            <h1>{{status}} {{title}}</h1><p class="error" data-code="{{code}}">{{reason}}</p><p><a href="/">Back</a></p>
            """,
    ]

    /// The one stylesheet (served from /static/console.css: the CSP allows no inline style).
    static let stylesheet = """
        :root { font-family: system-ui, sans-serif; color: #1d1d1f; background: #fafafa; }
        body { margin: 0; }
        header { display: flex; flex-wrap: wrap; gap: .75rem; align-items: center; padding: .6rem 1rem; background: #fff; border-bottom: 1px solid #ddd; }
        header .brand { font-weight: 600; text-decoration: none; color: inherit; }
        header .search { flex: 1 1 18rem; display: flex; gap: .4rem; }
        header .search input { flex: 1; min-width: 0; }
        nav { display: flex; gap: .75rem; align-items: center; flex-wrap: wrap; }
        main { padding: 1rem; max-width: 80rem; margin: 0 auto; }
        h1 small, h2 small { font-weight: normal; color: #666; }
        table { border-collapse: collapse; width: 100%; display: block; overflow-x: auto; }
        th, td { text-align: left; padding: .3rem .5rem; border-bottom: 1px solid #eee; vertical-align: top; font-size: .9rem; }
        pre { white-space: pre-wrap; word-break: break-all; background: #f2f2f2; padding: .5rem; max-height: 24rem; overflow: auto; font-size: .8rem; }
        pre.payload { max-height: 8rem; max-width: 40rem; }
        .card { display: grid; gap: .6rem; max-width: 32rem; background: #fff; padding: 1rem; border: 1px solid #ddd; }
        .timeline { list-style: none; padding: 0; }
        .timeline .row { display: flex; flex-wrap: wrap; gap: .25rem .75rem; padding: .5rem; border-left: 4px solid #999; margin-bottom: .4rem; background: #fff; }
        .timeline .applied { border-color: #2a7; } .timeline .unchanged { border-color: #bbb; } .timeline .dead-lettered { border-color: #d33; }
        .timeline .event { border-color: #37c; } .timeline .action { border-color: #a5c; }
        .what { font-weight: 600; } .times, .ids, .kind { color: #555; font-size: .85rem; } .reason { font-style: italic; }
        .error { color: #b00; } .warn { color: #a60; } .notice { background: #eef8ee; padding: .5rem; } .empty { color: #777; }
        .inline { display: inline; } button.link { background: none; border: none; color: #06c; cursor: pointer; padding: 0; }
        @media (max-width: 40rem) { main { padding: .5rem; } th, td { font-size: .8rem; } }
        """
}
