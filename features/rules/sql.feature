@needs:topics
Feature: SQL filters
  A SQL filter is a condition in a subset of SQL-92 over the message's system properties
  (sys.) and user properties; a message is selected only when the condition is TRUE.

  Background:
    Given a topic "t" with subscriptions "s"

  @RULES-SQL-001
  Scenario: Relational operators on user properties, with and without the user scope
    Given "t/Subscriptions/s" has only the rule "r" with SQL filter `user.qty >= 10 AND price < 5.5 AND color <> 'red' AND shop != 'x'`
    When message "hit" with properties "qty" = 10 and "price" = 5 and "color" = "blue" and "shop" = "y" is sent to "t"
    And message "low-qty" with properties "qty" = 9 and "price" = 5 and "color" = "blue" and "shop" = "y" is sent to "t"
    And message "red" with properties "qty" = 10 and "price" = 5 and "color" = "red" and "shop" = "y" is sent to "t"
    And message "shop-x" with properties "qty" = 10 and "price" = 5 and "color" = "blue" and "shop" = "x" is sent to "t"
    Then peeking "t/Subscriptions/s" shows "hit"

  @RULES-SQL-002
  Scenario: System properties are named with sys.
    Given "t/Subscriptions/s" has only the rule "r" with SQL filter `sys.Label = 'invoice' AND sys.To = 'billing' AND sys.CorrelationId = 'c1' AND sys.ContentType = 'application/json'`
    When message "hit" with label "invoice", to "billing", correlation id "c1" and content type "application/json" is sent to "t"
    And message "miss" with label "invoice", to "shipping", correlation id "c1" and content type "application/json" is sent to "t"
    Then peeking "t/Subscriptions/s" shows "hit"

  @RULES-SQL-002
  Scenario: sys.MessageId and sys.SessionId
    Given "t/Subscriptions/s" has only the rule "r" with SQL filter `sys.MessageId LIKE 'order-%' OR sys.SessionId = 'vip'`
    When messages "order-1", "invoice-1" are sent to "t"
    And message "session-msg" with session "vip" is sent to "t"
    Then peeking "t/Subscriptions/s" shows "order-1", "session-msg"

  @RULES-SQL-003 @RULES-SQL-004
  Scenario: Three-valued logic: a missing property is UNKNOWN, and UNKNOWN does not select
    Given "t/Subscriptions/s" has only the rule "r" with SQL filter `(missing = 1 OR a = 1) AND NOT (missing = 2 AND a = 2)`
    When message "a1" with property "a" = 1 is sent to "t"
    And message "a2" with property "a" = 2 is sent to "t"
    Then peeking "t/Subscriptions/s" shows "a1"

  @RULES-SQL-003 @RULES-SQL-004
  Scenario Outline: UNKNOWN in AND, OR and NOT
    Given "t/Subscriptions/s" has only the rule "r" with SQL filter `<condition>`
    When message "m" with property "a" = 1 is sent to "t"
    Then peeking "t/Subscriptions/s" shows <shown>

    Examples:
      | condition                       | shown   |
      | missing = 1 OR a = 1            | "m"     |
      | missing = 1 AND a = 2           | nothing |
      | missing = 1 AND a = 1           | nothing |
      | missing = 1 OR a = 2            | nothing |
      | NOT (missing = 1)               | nothing |
      | NOT (missing = 1 AND a = 2)     | "m"     |
      | missing + 1 = 2 OR a = 1        | "m"     |
      | NOT (missing * 2 > 1 OR a <> 1) | nothing |

  @RULES-SQL-005
  Scenario: IS NULL is true for a missing property and for a null value
    Given "t/Subscriptions/s" has only the rule "r" with SQL filter `note IS NULL`
    And rule "r2" with SQL filter `note IS NOT NULL AND note = 'x'` is added to "t/Subscriptions/s"
    When message "missing" is sent to "t"
    And message "null-value" with property "note" = null is sent to "t"
    And message "set" with property "note" = "x" is sent to "t"
    And message "other" with property "note" = "y" is sent to "t"
    Then peeking "t/Subscriptions/s" shows "missing", "null-value", "set"

  @RULES-SQL-006
  Scenario: EXISTS tests whether the message has the property
    Given "t/Subscriptions/s" has only the rule "r" with SQL filter `EXISTS(tag) AND NOT EXISTS(sys.CorrelationId)`
    When message "tagged" with property "tag" = "x" is sent to "t"
    And message "untagged" is sent to "t"
    And message "null-tag" with property "tag" = null is sent to "t"
    And message "correlated" with property "tag" = "x" and correlation id "c" is sent to "t"
    Then peeking "t/Subscriptions/s" shows "tagged", "null-tag"

  @RULES-SQL-007
  Scenario: IN and NOT IN, and UNKNOWN on the left
    Given "t/Subscriptions/s" has only the rule "r" with SQL filter `store IN ('s1', 's2', 's3')`
    And rule "not-in" with SQL filter `region NOT IN ('eu', 'us')` is added to "t/Subscriptions/s"
    When message "s2" with property "store" = "s2" is sent to "t"
    And message "s9" with property "store" = "s9" is sent to "t"
    And message "asia" with property "region" = "asia" is sent to "t"
    And message "eu" with property "region" = "eu" is sent to "t"
    And message "no-region" is sent to "t"
    Then peeking "t/Subscriptions/s" shows "s2", "asia"

  @RULES-SQL-008
  Scenario: LIKE with % and _, NOT LIKE, and ESCAPE
    Given "t/Subscriptions/s" has only the rule "r" with SQL filter `sys.Label LIKE '%bus%'`
    And rule "one-char" with SQL filter `code LIKE 'A_C'` is added to "t/Subscriptions/s"
    And rule "escaped" with SQL filter `pct LIKE 'ABC\%' ESCAPE '\'` is added to "t/Subscriptions/s"
    And rule "not-like" with SQL filter `name NOT LIKE 'x%'` is added to "t/Subscriptions/s"
    When message "bus" with label "servicebus rocks" is sent to "t"
    And message "train" with label "train" is sent to "t"
    And message "abc" with property "code" = "ABC" is sent to "t"
    And message "abbc" with property "code" = "ABBC" is sent to "t"
    And message "abcd" with property "code" = "ABCD" is sent to "t"
    And message "literal" with property "pct" = "ABC%" is sent to "t"
    And message "prefix" with property "pct" = "ABCD" is sent to "t"
    And message "y-name" with property "name" = "yves" is sent to "t"
    And message "x-name" with property "name" = "xavier" is sent to "t"
    Then peeking "t/Subscriptions/s" shows "bus", "abc", "literal", "y-name"

  @RULES-SQL-009
  Scenario: Arithmetic in conditions
    Given "t/Subscriptions/s" has only the rule "r" with SQL filter `(qty * price) - discount > 100 AND -qty < 0 AND qty % 2 = 1 AND +qty / 3 = 1`
    When message "hit" with properties "qty" = 5 and "price" = 30 and "discount" = 10 is sent to "t"
    And message "cheap" with properties "qty" = 5 and "price" = 20 and "discount" = 10 is sent to "t"
    And message "even" with properties "qty" = 4 and "price" = 30 and "discount" = 10 is sent to "t"
    And message "no-discount" with properties "qty" = 5 and "price" = 30 is sent to "t"
    Then peeking "t/Subscriptions/s" shows "hit"

  @RULES-SQL-010
  Scenario: Constants: long, decimal, scientific, boolean, strings with doubled quotes
    Given "t/Subscriptions/s" has only the rule "r" with SQL filter `9223372036854775807 > big AND big * 4294967296 = 8589934592 AND ratio = 0.5E0 AND rate = 101.5E5 AND ok = TRUE AND name = 'O''Brien'`
    When message "hit" with properties "big" = 2 and "ratio" = 0.5 and "rate" = 10150000.0 and "ok" = true and "name" = "O'Brien" is sent to "t"
    And message "miss" with properties "big" = 2 and "ratio" = 0.5 and "rate" = 10150000.0 and "ok" = false and "name" = "O'Brien" is sent to "t"
    And message "quote" with properties "big" = 2 and "ratio" = 0.5 and "rate" = 10150000.0 and "ok" = true and "name" = "OBrien" is sent to "t"
    Then peeking "t/Subscriptions/s" shows "hit"

  @RULES-SQL-011
  Scenario: Numbers promote as in C#: long compares with double, long division truncates
    Given "t/Subscriptions/s" has only the rule "r" with SQL filter `qty = 10.0 AND qty / 4 = 2 AND qty / 4.0 = 2.5`
    When message "long" with property "qty" = 10 is sent to "t"
    And message "double" with property "qty" = 10.0 is sent to "t"
    Then peeking "t/Subscriptions/s" shows "long"

  @RULES-SQL-012
  Scenario: Property names are case-insensitive
    Given "t/Subscriptions/s" has only the rule "r" with SQL filter `COLOR = 'red' AND sys.label = 'x' AND USER.Size > 1`
    When message "hit" with label "x" and properties "color" = "red" and "size" = 2 is sent to "t"
    Then peeking "t/Subscriptions/s" shows "hit"

  @RULES-SQL-013
  Scenario: Delimited and quoted identifiers
    Given "t/Subscriptions/s" has only the rule "r" with SQL filter `[Property With Space] = 1 AND [HR-EmployeeID] = 'e1' AND [odd]]name] = 2 AND "Contoso & Northwind" = TRUE`
    When message "hit" with properties "Property With Space" = 1 and "HR-EmployeeID" = "e1" and "odd]name" = 2 and "Contoso & Northwind" = true is sent to "t"
    Then peeking "t/Subscriptions/s" shows "hit"

  @RULES-SQL-015
  Scenario: property(name) and p(name) read a property named by an expression
    Given "t/Subscriptions/s" has only the rule "r" with SQL filter `property('col' + 'or') = 'red' OR p('sys.Label') = 'x'`
    When message "red" with property "color" = "red" is sent to "t"
    And message "labelled" with label "x" is sent to "t"
    And message "blue" with property "color" = "blue" is sent to "t"
    Then peeking "t/Subscriptions/s" shows "red", "labelled"

  @RULES-SQL-014
  Scenario Outline: An invalid SQL filter is refused when the rule is created, saying where
    When rule "bad" with SQL filter `<sql>` is added to "t/Subscriptions/s"
    Then the operation fails with "argument-error"
    And the error says where: position <position>
    And the rules of "t/Subscriptions/s" are "$Default"

    Examples:
      | sql                         | position |
      | color = = 'red'             | 9        |
      | color = 'red                | 9        |
      | a = 1 AND                   | 10       |
      | nosuchfn(a) = 1             | 1        |
      | a = 99999999999999999999    | 5        |
      | a IN ()                     | 7        |
      | a LIKE                      | 7        |

  @RULES-SQL-014
  Scenario: An invalid SQL action is refused when the rule is created, saying where
    When rule "bad" with SQL filter `a = 1` and action `SET b = ` is added to "t/Subscriptions/s"
    Then the operation fails with "argument-error"
    And the error says where: position 9
    And the rules of "t/Subscriptions/s" are "$Default"

  @RULES-SQL-014
  Scenario: A SQL filter longer than 1024 characters is refused
    When rule "long" with a SQL filter of 1025 characters is added to "t/Subscriptions/s"
    Then the operation fails with "argument-error"
    And the rules of "t/Subscriptions/s" are "$Default"
