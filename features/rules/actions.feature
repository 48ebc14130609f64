@needs:topics
Feature: Rule actions
  A rule with an action makes its own annotated copy of each message it selects; the changes
  belong to that copy only.

  @RULES-ACT-001
  Scenario: Five matching rules, two with actions: three copies
    Given a topic "t" with subscriptions "s"
    And "t/Subscriptions/s" has only the rule "plain1" with the true filter
    When rule "plain2" with SQL filter `qty > 1` is added to "t/Subscriptions/s"
    And rule "plain3" with correlation filter property "kind" = "order" is added to "t/Subscriptions/s"
    And rule "act1" with SQL filter `kind = 'order'` and action `SET stage = 'one'` is added to "t/Subscriptions/s"
    And rule "act2" with the true filter and action `SET stage = 'two'` is added to "t/Subscriptions/s"
    And message "m" with properties "kind" = "order" and "qty" = 5 is sent to "t"
    Then peeking "t/Subscriptions/s" shows 3 copies of "m"
    And the copy of "m" in "t/Subscriptions/s" without a rule name has property "kind" = "order" and no property "stage"
    And the copy of "m" in "t/Subscriptions/s" made by rule "act1" has property "stage" = "one"
    And the copy of "m" in "t/Subscriptions/s" made by rule "act2" has property "stage" = "two"

  @RULES-ACT-001
  Scenario: A rule with an action that alone matches gives one annotated copy
    Given a topic "t" with subscriptions "s"
    And "t/Subscriptions/s" has only the rule "tag" with SQL filter `color = 'red'` and action `SET seen = TRUE`
    When message "red" with property "color" = "red" is sent to "t"
    And message "blue" with property "color" = "blue" is sent to "t"
    Then peeking "t/Subscriptions/s" shows 1 copies of "red"
    And peeking "t/Subscriptions/s" shows "red"
    And the copy of "red" in "t/Subscriptions/s" made by rule "tag" has property "seen" = true

  @RULES-ACT-002
  Scenario: SET and REMOVE change only the subscription's copy
    Given a topic "t" with subscriptions "changed", "other"
    And "t/Subscriptions/changed" has only the rule "edit" with the true filter and action `SET color = 'blue'; SET added = 'yes'; REMOVE secret`
    When message "m" with properties "color" = "red" and "secret" = "s3cr3t" is sent to "t"
    Then the copy of "m" in "t/Subscriptions/changed" made by rule "edit" has property "color" = "blue", property "added" = "yes" and no property "secret"
    And the copy of "m" in "t/Subscriptions/other" without a rule name has property "color" = "red", property "secret" = "s3cr3t" and no property "added"

  @RULES-ACT-003
  Scenario: Actions set system properties and compute from the message's properties
    Given a topic "t" with subscriptions "s"
    And "t/Subscriptions/s" has only the rule "halve" with SQL filter `user.color = 'red'` and action `SET quantity = quantity / 2; SET sys.Label = 'halved'`
    When message "m" with label "original" and properties "color" = "red" and "quantity" = 10 is sent to "t"
    Then the copy of "m" in "t/Subscriptions/s" made by rule "halve" has property "quantity" = 5 and label "halved"

  @RULES-ACT-004
  Scenario: An action reading a missing user property does not fail
    Given a topic "t" with subscriptions "s"
    And "t/Subscriptions/s" has only the rule "r" with the true filter and action `SET total = missing + 1; REMOVE alsomissing`
    When message "m" is sent to "t"
    Then peeking "t/Subscriptions/s" shows "m"
    And peeking "t/Subscriptions/s/$DeadLetterQueue" shows nothing

  @RULES-SQL-018
  Scenario: newid() gives every copy a new GUID
    Given a topic "t" with subscriptions "a", "b"
    And "t/Subscriptions/a" has only the rule "ida" with the true filter and action `SET id = newid()`
    And "t/Subscriptions/b" has only the rule "idb" with the true filter and action `SET id = newid()`
    When message "m1" is sent to "t"
    And message "m2" is sent to "t"
    Then property "id" of the copies of "m1" and "m2" in "t/Subscriptions/a" and "t/Subscriptions/b" holds 4 different GUIDs
